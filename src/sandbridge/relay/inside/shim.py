"""The shim on ``upstream.sock``: the only way host traffic reaches sandbox apps.

It answers two kinds of connection, told apart by the first line:

* ``http_stream`` (sandbridge's stream mode): connect to the app's port, answer
  ``{"ok":true,"stream":1}``, then copy bytes both ways untouched; or, when the host
  offers a handoff, pass the connected socket to the host and step out;
* ``http_request`` (forwarding v1 of the accepted design): perform one buffered HTTP
  exchange with the app and answer with one JSON line, as the contract says.

It only ever connects to loopback, on the port the request names: ``127.0.0.1``, else
``::1`` where that refused (:mod:`sandbridge.protocol.app_address`: an app may listen on
either).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from sandbridge import log
from sandbridge.aio.before_loop import UNIX_BACKLOG, bind_unix_socket
from sandbridge.aio.tasks import TaskSet
from sandbridge.aio.unix_sockets import Pump, close_writer
from sandbridge.exceptions import AppUnreachable, HttpError, WireError
from sandbridge.protocol import stream, v1
from sandbridge.protocol.http.base_path import apply_base_path
from sandbridge.protocol.http.forwarding import FRAMING, end_to_end_fields
from sandbridge.protocol.http.parser import MESSAGE_END, BodyChunk, ResponseHead, ResponseReader
from sandbridge.protocol.jsonline import LineReader
from sandbridge.protocol.limits import MAX_V1_BODY_BYTES, V1_EXCHANGE_TIMEOUT
from sandbridge.protocol.shim_opening import (
    FIRST_LINE_TIMEOUT,
    MAX_FIRST_LINE_BYTES,
    Exchange,
    HandOff,
    Refuse,
    connect_failed,
    decide,
    refusal,
)
from sandbridge.relay.host.app_connector import connect_app


async def _connect_app(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = await connect_app(port)
    try:
        return await asyncio.open_connection(sock=sock, limit=256 * 1024)
    except BaseException:
        sock.close()
        raise


class _AppSide(Pump):
    """The shim's TCP connection to the app; silent until linked to its host side."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        self.transport.pause_reading()  # resumed once the ack is on its way
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _HostSide(Pump):
    """One connection from the host on ``upstream.sock``.

    It reads the first line itself (a stream opening or a v1 request), then, for a
    stream, forwards bytes from its read callback (:class:`Pump`): no task and no
    stream buffers per connection once the stream runs, which is what the shim spends
    per keep-alive request and per idle WebSocket.
    """

    def __init__(
        self, shim: Shim, received: bytes = b"", first_line_left: float = FIRST_LINE_TIMEOUT
    ) -> None:
        super().__init__()
        self._shim = shim
        self._lines: LineReader | None = LineReader(MAX_FIRST_LINE_BYTES)
        self._timer: asyncio.TimerHandle | None = None
        # What the light shim read before it passed the connection on (Shim.adopt).
        self._received = received
        self._first_line_left = first_line_left

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._timer = asyncio.get_running_loop().call_later(
            max(0.0, self._first_line_left), self._refuse, "timed out"
        )
        received, self._received = self._received, b""
        if received:  # before anything the transport reads: it reads from the next step
            self.data_received(received)

    def data_received(self, data: bytes) -> None:
        if self._lines is None:
            super().data_received(data)
            return
        try:
            line = self._lines.feed(data)
        except WireError as exc:
            self._refuse(str(exc))
            return
        if line is not None:
            self._dispatch(line, self._lines.rest)

    def eof_received(self) -> bool:
        if self._lines is None:
            return super().eof_received()
        self.ended = True
        try:
            line = self._lines.feed_eof()
        except WireError as exc:
            self._refuse(str(exc))
            return False
        self._dispatch(line, self._lines.rest)
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        super().connection_lost(exc)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _refuse(self, reason: str) -> None:
        self._answer(refusal(reason))

    def _answer(self, refused: Refuse) -> None:
        log.debug("shim.refused", answer=refused.answer[:200])
        self._stop_timer()
        self._lines = None
        assert self.transport is not None
        self.transport.write(refused.answer)
        self.transport.close()

    def _dispatch(self, line: bytes, rest: bytes) -> None:
        self._stop_timer()
        self._lines = None
        assert self.transport is not None
        decision = decide(line, rest, self.ended)
        if isinstance(decision, Refuse):
            self._answer(decision)
            return
        self.transport.pause_reading()  # nothing more is read until the stream is linked
        if isinstance(decision, HandOff):
            self._shim.spawn(self._hand_off(decision.port))
        elif isinstance(decision, Exchange):
            self._shim.spawn(self._serve_v1(decision.message))
        else:
            self._shim.spawn(self._open_stream(decision.port, rest))

    async def _open_stream(self, port: int, rest: bytes) -> None:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        try:
            sock = await connect_app(port)
        except AppUnreachable as exc:
            self.transport.write(connect_failed(str(exc)))
            self.transport.close()
            return
        try:
            _, app = await loop.create_connection(_AppSide, sock=sock)
        except BaseException:
            sock.close()
            raise
        if self.transport.is_closing():
            app.abort()
            return
        self.transport.write(stream.encode_ack())
        self.link(app)
        # The host decides when a stream is over: both halves run to their end.
        if rest:
            self.data_received(rest)
        if self.ended:
            self.eof_received()
        else:
            self.transport.resume_reading()
        assert app.transport is not None
        app.transport.resume_reading()

    async def _hand_off(self, port: int) -> None:
        """Connect to the app and give the connected socket to the host (``SCM_RIGHTS``).

        The shim then has no part in this connection's traffic: every request on it
        crosses one Python process (the host) instead of two, which is most of what
        the relay spent per request beyond nginx. The host checks what it receives.
        """
        assert self.transport is not None
        try:
            app = await connect_app(port)
        except AppUnreachable as exc:
            self.transport.write(connect_failed(str(exc)))
            self.transport.close()
            return
        try:
            if self.transport.is_closing():
                return
            host_fd = self.transport.get_extra_info("socket").fileno()
            # The transport's socket object cannot sendmsg under uvloop; a duplicate
            # of its descriptor can. The answer is one small write to an empty buffer.
            with socket.socket(fileno=os.dup(host_fd)) as host:
                socket.send_fds(host, [stream.encode_ack(handoff=True)], [app.fileno()])
        except OSError as exc:
            log.debug("shim.handoff_failed", reason=str(exc))
        finally:
            app.close()  # the host holds its own copy now (or nobody does)
            self.transport.close()

    async def _serve_v1(self, message: dict[str, object]) -> None:
        assert self.transport is not None
        try:
            request = v1.decode_request_message(message)
            async with asyncio.timeout(V1_EXCHANGE_TIMEOUT):
                response = await _exchange_v1(request)
            answer = v1.encode_response(response)
        except (WireError, HttpError) as exc:
            answer = v1.encode_error(str(exc))
        except AppUnreachable as exc:
            answer = v1.encode_error(str(exc))
        except (OSError, TimeoutError) as exc:
            answer = v1.encode_error(f"app on port {request.port} failed: {exc or 'timed out'}")
        if not self.transport.is_closing():
            self.transport.write(answer)
            self.transport.close()


class Shim:
    """Listens on ``upstream.sock`` inside the sandbox."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._server: asyncio.Server | None = None
        # The stream openings and v1 exchanges in progress; close() ends them.
        self._tasks = TaskSet()

    async def start(self, sock: socket.socket | None = None) -> None:
        """Serve on ``sock``, a listener already bound at the path (the sandbox entry
        binds it before the command starts), else on a new one."""
        if sock is None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            sock = bind_unix_socket(self.path)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(
            lambda: _HostSide(self), sock=sock, backlog=UNIX_BACKLOG
        )

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._tasks.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def serve_forever(self) -> None:
        assert self._server is not None
        await self._server.serve_forever()

    def adopt(self, sock: socket.socket, received: bytes, first_line_left: float) -> None:
        """Serve a connection the light shim (:mod:`.light_shim`) passed on: ``received``
        is what it read from ``sock``, ``first_line_left`` how long the rest of its first
        line may take."""
        self._tasks.spawn(self._adopt(sock, received, first_line_left))

    async def _adopt(self, sock: socket.socket, received: bytes, first_line_left: float) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(
                lambda: _HostSide(self, received, first_line_left), sock
            )
        except BaseException:
            sock.close()
            raise

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run one connection's opening step; the shim owns it until it ends."""
        self._tasks.spawn(work)


async def _exchange_v1(request: v1.V1Request) -> v1.V1Response:
    """One buffered HTTP/1.1 exchange with the app, for a v1 request."""
    path = apply_base_path(request.path, request.base_path)
    lines = [f"{request.method} {path} HTTP/1.1".encode("ascii")]
    lines.extend(
        name + b": " + value for name, value in end_to_end_fields(request.headers, FRAMING)
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
                    headers = end_to_end_fields(head.headers, FRAMING)
                    return v1.V1Response(
                        head.status, head.reason.decode("latin-1"), headers, bytes(body)
                    )
            if not data:
                raise WireError("app closed before its response was complete")
    finally:
        await close_writer(app_writer)
