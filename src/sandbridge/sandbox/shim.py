"""The shim on ``upstream.sock``: the only way host traffic reaches sandbox apps.

It answers two kinds of connection, told apart by the first line:

* ``http_stream`` (sandbridge's stream mode): connect to ``127.0.0.1:<port>``, answer
  ``{"ok":true,"stream":1}``, then copy bytes both ways untouched;
* ``http_request`` (forwarding v1 of the accepted design): perform one buffered HTTP
  exchange with the app and answer with one JSON line, as the contract says.

It only ever connects to 127.0.0.1, on the port the request names.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

from sandbridge import log
from sandbridge.exceptions import HttpError, WireError
from sandbridge.http.base_path import apply_base_path
from sandbridge.http.forwarding import HOP_BY_HOP
from sandbridge.http.parser import MESSAGE_END, BodyChunk, ResponseHead, ResponseReader
from sandbridge.unix_sockets import bind_unix_socket, close_writer, copy_both_ways, read_line
from sandbridge.wire import stream, v1
from sandbridge.wire.jsonline import decode_object
from sandbridge.wire.limits import MAX_V1_BODY_BYTES, MAX_V1_LINE_BYTES, V1_EXCHANGE_TIMEOUT

# The host sends its first line at once; a connection silent this long is dropped.
FIRST_LINE_TIMEOUT = 10.0
# Connecting to a loopback port either works or is refused at once.
APP_CONNECT_TIMEOUT = 5.0


async def _connect_app(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    async with asyncio.timeout(APP_CONNECT_TIMEOUT):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=256 * 1024)
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return reader, writer


class Shim:
    """Listens on ``upstream.sock`` inside the sandbox."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._server = await asyncio.start_unix_server(
            self._serve, sock=bind_unix_socket(self.path), limit=256 * 1024
        )

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def serve_forever(self) -> None:
        assert self._server is not None
        await self._server.serve_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(FIRST_LINE_TIMEOUT):
                line, rest = await read_line(reader, MAX_V1_LINE_BYTES)
            message = decode_object(line)
            if message.get("type") == "http_stream":
                await self._serve_stream(message, rest, reader, writer)
            else:
                await self._serve_v1(message, writer)
        except (WireError, TimeoutError, OSError) as exc:
            log.debug("shim.refused", reason=str(exc))
            with contextlib.suppress(OSError):
                writer.write(v1.encode_error(str(exc) or "timed out"))
                await writer.drain()
        finally:
            writer.transport.abort()

    async def _serve_stream(
        self,
        message: dict[str, object],
        rest: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        try:
            port = stream.decode_open(message)
        except WireError as exc:
            writer.write(stream.encode_ack(str(exc)))
            await writer.drain()
            return
        try:
            app_reader, app_writer = await _connect_app(port)
        except (OSError, TimeoutError) as exc:
            writer.write(stream.encode_ack(f"connect to 127.0.0.1:{port} failed: {exc}"))
            await writer.drain()
            return
        try:
            writer.write(stream.encode_ack())
            if rest:
                app_writer.write(rest)
            # The host decides when a stream is over: both halves run to their end.
            await copy_both_ways(reader, writer, app_reader, app_writer, grace=None)
        finally:
            app_writer.transport.abort()

    async def _serve_v1(self, message: dict[str, object], writer: asyncio.StreamWriter) -> None:
        try:
            request = v1.decode_request_message(message)
            async with asyncio.timeout(V1_EXCHANGE_TIMEOUT):
                response = await _exchange_v1(request)
            answer = v1.encode_response(response)
        except (WireError, HttpError) as exc:
            answer = v1.encode_error(str(exc))
        except (OSError, TimeoutError) as exc:
            answer = v1.encode_error(f"app at 127.0.0.1 failed: {exc or 'timed out'}")
        writer.write(answer)
        await writer.drain()


async def _exchange_v1(request: v1.V1Request) -> v1.V1Response:
    """One buffered HTTP/1.1 exchange with the app, for a v1 request."""
    path = apply_base_path(request.path, request.base_path)
    lines = [f"{request.method} {path} HTTP/1.1".encode("ascii")]
    framing_fields = {b"content-length", b"transfer-encoding", b"connection"}
    lines.extend(
        name + b": " + value
        for name, value in request.headers
        if name.lower() not in HOP_BY_HOP and name.lower() not in framing_fields
    )
    if request.body or request.method in ("POST", "PUT", "PATCH"):
        lines.append(b"Content-Length: %d" % len(request.body))
    lines.append(b"Connection: close")
    app_reader, app_writer = await _connect_app(request.port)
    try:
        app_writer.write(b"\r\n".join(lines) + b"\r\n\r\n" + request.body)
        await app_writer.drain()
        reader = ResponseReader(request.method.encode("ascii"))
        head: ResponseHead | None = None
        body = bytearray()
        while True:
            data = await app_reader.read(256 * 1024)
            events = reader.feed(data) if data else reader.feed_eof()
            for event in events:
                if isinstance(event, ResponseHead) and event.status >= 200:
                    head = event
                elif isinstance(event, BodyChunk):
                    if len(body) + len(event.data) > MAX_V1_BODY_BYTES:
                        raise WireError(f"response body over the v1 limit of {MAX_V1_BODY_BYTES}")
                    body += event.data
                elif event is MESSAGE_END and head is not None:
                    headers = [
                        (name, value)
                        for name, value in head.headers
                        if name.lower() not in HOP_BY_HOP and name.lower() not in framing_fields
                    ]
                    return v1.V1Response(
                        head.status, head.reason.decode("latin-1"), headers, bytes(body)
                    )
            if not data:
                raise WireError("app closed before its response was complete")
    finally:
        await close_writer(app_writer)
