"""The host speaking forwarding v1 to a shim that knows nothing else.

v1 carries whole bodies in one JSON line, so this path buffers, with the bodies capped
at :data:`~sandbridge.protocol.limits.MAX_V1_BODY_BYTES` (413 past it) and the answer line
capped too. It cannot carry protocol upgrades (WebSocket), which get a 501 naming why.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from sandbridge import log
from sandbridge.aio.unix_sockets import read_line
from sandbridge.exceptions import HttpError, UpstreamError, WireError
from sandbridge.protocol import v1
from sandbridge.protocol.http.forwarding import build_browser_response, error_response
from sandbridge.protocol.http.parser import MESSAGE_END, BodyChunk, RequestHead, ResponseHead
from sandbridge.protocol.limits import MAX_V1_BODY_BYTES, MAX_V1_LINE_BYTES
from sandbridge.relay.host.upstream import connect_unix_checked

if TYPE_CHECKING:
    from sandbridge.protocol.http.forwarding import UpstreamRequest
    from sandbridge.relay.listener.browser import BrowserConnection


async def _read_body(browser: BrowserConnection) -> bytes:
    body = bytearray()
    while True:
        event = await browser.next_event()
        if event is None:
            raise OSError("browser closed the connection mid-request")
        if event is MESSAGE_END:
            return bytes(body)
        if isinstance(event, BodyChunk):
            if len(body) + len(event.data) > MAX_V1_BODY_BYTES:
                raise HttpError(
                    413, f"request body over {MAX_V1_BODY_BYTES} bytes: the shim speaks only v1"
                )
            body += event.data


async def _round_trip(socket_path: Path, request: v1.V1Request, timeout: float) -> v1.V1Response:
    sock = await connect_unix_checked(socket_path)
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    try:
        writer.write(v1.encode_request(request))
        await writer.drain()
        async with asyncio.timeout(timeout):
            line, _ = await read_line(reader, MAX_V1_LINE_BYTES)
        return v1.decode_response(line)
    except (WireError, OSError, TimeoutError) as exc:
        raise UpstreamError(f"v1 exchange failed: {exc or 'timed out'}") from None
    finally:
        writer.transport.abort()


async def exchange_v1(  # noqa: PLR0913  (what one v1 exchange needs from the listener, named)
    browser: BrowserConnection,
    head: RequestHead,
    request: UpstreamRequest,
    port: int,
    base_path: str,
    socket_path: Path,
    timeout: float,
) -> bool:
    """Relay one request over v1; return whether the browser connection stays open."""
    if request.upgrade:
        await browser.send(
            error_response(501, "protocol upgrades need stream mode; the shim speaks only v1")
        )
        return False
    body = await _read_body(browser)
    headers = list(request.headers)
    if body:
        headers.append((b"Content-Length", str(len(body)).encode()))
    try:
        answer = await _round_trip(
            socket_path,
            v1.V1Request(
                port=port,
                base_path=base_path,
                method=request.method.decode("ascii"),
                path=request.path,
                headers=headers,
                body=body,
            ),
            timeout,
        )
    except UpstreamError as exc:
        log.debug("upstream.failed", app_port=port, reason=str(exc))
        keep = head.keep_alive and head.version == "1.1"
        await browser.send(error_response(502, str(exc), keep_alive=keep))
        return keep
    response_headers = [
        (name, value)
        for name, value in answer.headers
        if name.lower() not in (b"content-length", b"transfer-encoding")
    ]
    if answer.status not in (204, 304):
        response_headers.append((b"Content-Length", str(len(answer.body)).encode()))
    response = build_browser_response(
        ResponseHead(answer.status, answer.reason.encode("latin-1"), "1.1", response_headers, True),
        request=head,
        close_delimited=False,
        keep_alive=True,
        sandbox_port=port,
        private=browser.heads.private,
    )
    await browser.send(response.head)
    if answer.body and head.method != b"HEAD" and answer.status not in (204, 304):
        await browser.send(answer.body)
    return response.keep_alive
