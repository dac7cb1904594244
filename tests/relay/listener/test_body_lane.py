"""The body lane (:class:`sandbridge.relay.listener.body_lane.BodyLane`): a streamed
response body relayed from the app connection's read callback while the task waits.

Each test runs an in-process listener in front of a scripted app (a real TCP server
whose connections run a script), with a connector that keeps the app connections it
opens, so that a test can see which lane holds one.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable

from sandbridge.aio import event_loop
from sandbridge.relay.host.channel import Channel
from sandbridge.relay.host.settings import RelaySettings, SessionScope
from sandbridge.relay.listener.app_listener import AppListener
from sandbridge.relay.listener.body_lane import BodyLane
from tests.relay.listener.test_lane import Script, ScriptedApp, _TcpConnector, ok, scripted

__all__ = ["scripted"]  # the fixture, used by name

STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


class _Keeping(_TcpConnector):
    """The test's upstream: plain TCP to the app, each channel kept for the test."""

    def __init__(self, app_port: int) -> None:
        super().__init__(app_port)
        self.channels: list[Channel] = []

    async def open(self, port: int) -> tuple[Channel, bytes] | None:
        opened = await super().open(port)
        assert opened is not None
        self.channels.append(opened[0])
        return opened


Body = Callable[[AppListener, int, bytes, list[Channel]], Awaitable[None]]


def run(app: ScriptedApp, body: Body, **settings: float) -> None:
    """``body(listener, port, host_line, app_channels)`` against an in-process listener."""

    async def main() -> None:
        connector = _Keeping(app.port)
        scope = SessionScope(RelaySettings(**settings))  # type: ignore[arg-type]
        listener = AppListener(app.port, "/", connector, scope)
        port = await listener.start()
        assert listener.origin is not None
        host = f"Host: {listener.origin.hostname}:{port}\r\n".encode()
        try:
            await body(listener, port, host, connector.channels)
        finally:
            await listener.close()

    event_loop.run(main())


async def read_exactly(reader: asyncio.StreamReader, expected: bytes) -> None:
    assert await asyncio.wait_for(reader.readexactly(len(expected)), 10) == expected


async def dechunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked body read to its last chunk (the relay frames each read of its own)."""
    body = bytearray()
    while size := int(await reader.readuntil(b"\r\n"), 16):
        body += (await reader.readexactly(size + 2))[:-2]
    assert await reader.readexactly(2) == b"\r\n"
    return bytes(body)


async def stream_started(
    port: int, host: bytes, first: bytes, apps: list[Channel]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A browser's ``GET /events`` whose head and ``first`` piece have arrived, the rest
    of the stream held by a body lane."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /events HTTP/1.1\r\n" + host + b"\r\n")
    await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    await read_exactly(reader, chunk(first))
    assert isinstance(apps[0].lane, BodyLane)
    return reader, writer


async def nothing_left(listener: AppListener) -> None:
    """Every connection's task done and every place given back (polled, bounded)."""
    for _ in range(1000):
        if listener.scope.budget.session.held == 0 and not listener.tasks:
            break
        await asyncio.sleep(0.01)
    assert listener.scope.budget.session.held == 0
    listener.scope.budget.check()
    assert not listener.tasks


def test_a_stream_is_relayed_piece_by_piece_by_the_lane_and_the_connection_kept(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """Each event reaches the browser before the app sends the next, from the lane,
    framed as the task frames it; at the end the task takes over again and the same
    browser and app connections carry the next exchange."""
    turn = threading.Semaphore(0)

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        app.read_request(conn)
        conn.sendall(STREAM_HEAD)
        for index in range(5):
            assert turn.acquire(timeout=10)
            conn.sendall(chunk(b"data: %d\n\n" % index))
        assert turn.acquire(timeout=10)
        conn.sendall(b"0\r\n\r\n")
        app.read_request(conn)
        conn.sendall(ok(b"next"))

    app = scripted(script)

    async def body(listener: AppListener, port: int, host: bytes, apps: list[Channel]) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /events HTTP/1.1\r\n" + host + b"\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"Transfer-Encoding: chunked\r\n" in head
        (upstream,) = apps
        for index in range(5):
            assert isinstance(upstream.lane, BodyLane)
            turn.release()
            await read_exactly(reader, chunk(b"data: %d\n\n" % index))
        assert isinstance(upstream.lane, BodyLane)
        turn.release()
        await read_exactly(reader, b"0\r\n\r\n")
        assert not isinstance(upstream.lane, BodyLane)
        writer.write(b"GET /next HTTP/1.1\r\n" + host + b"\r\n")
        response = await asyncio.wait_for(reader.readuntil(b"next"), 10)
        assert response.startswith(b"HTTP/1.1 200 OK\r\n")
        assert app.connections == 1
        writer.close()

    run(app, body)


def test_the_response_timeout_counts_the_apps_silence_from_its_last_bytes(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """Pieces 0.5 s apart pass a 1.5 s response timeout for as long as they come (the
    lane moves the task's deadline at each read: without that, the fifth piece, 2 s in,
    would come after the deadline); once the app falls silent the browser connection
    ends without the body's end, and the app connection is closed."""

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        app.read_request(conn)
        conn.sendall(STREAM_HEAD)
        for index in range(5):
            conn.sendall(chunk(b"data: %d\n\n" % index))
            time.sleep(0.5)  # the app's pacing, the behaviour under test
        app.read_request(conn)  # returns once the relay closes the connection

    app = scripted(script)

    async def body(listener: AppListener, port: int, host: bytes, apps: list[Channel]) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /events HTTP/1.1\r\n" + host + b"\r\n")
        started = time.monotonic()
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        await read_exactly(reader, chunk(b"data: 0\n\n"))
        assert isinstance(apps[0].lane, BodyLane)
        received = await asyncio.wait_for(reader.read(), 20)
        assert time.monotonic() - started >= 2.0 + 1.4  # the last piece's time, then 1.5 s
        assert received == b"".join(chunk(b"data: %d\n\n" % index) for index in range(1, 5))
        assert await asyncio.to_thread(app.closed_by_relay.wait, 10)
        writer.close()
        await nothing_left(listener)

    run(app, body, response_timeout=1.5)


def test_a_malformed_piece_mid_stream_cuts_that_connection_only(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """A chunk size that is not hex, after a good piece: the browser has the good piece
    and then the end of the connection (not a complete body); the next browser is served."""

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        request = app.read_request(conn)
        if request is not None and b"/events" in request:
            conn.sendall(STREAM_HEAD + chunk(b"data: good\n\n"))
            app.go.wait(10)
            conn.sendall(b"zz\r\nbad\r\n")
            app.read_request(conn)
        elif request is not None:
            conn.sendall(ok(b"fine"))

    app = scripted(script)

    async def body(listener: AppListener, port: int, host: bytes, apps: list[Channel]) -> None:
        reader, writer = await stream_started(port, host, b"data: good\n\n", apps)
        app.go.set()
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
        assert await asyncio.to_thread(app.closed_by_relay.wait, 10)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /other HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n")
        assert (await asyncio.wait_for(reader.read(), 10)).endswith(b"fine")
        writer.close()
        await nothing_left(listener)

    run(app, body)


def test_a_large_stream_arrives_whole(scripted: Callable[[Script], ScriptedApp]) -> None:
    """An app that sends a stream of pieces as fast as it can: whichever of the lane and
    the task relays each read, every byte arrives, in order."""
    pieces = [bytes([index % 251]) * (5_000 + index * 37) for index in range(400)]

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        app.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in pieces:
            conn.sendall(chunk(piece))
        conn.sendall(b"0\r\n\r\n")

    app = scripted(script)

    async def body(listener: AppListener, port: int, host: bytes, apps: list[Channel]) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /big HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n")
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        received = await asyncio.wait_for(dechunked(reader), 30)
        assert hashlib.sha256(received).digest() == hashlib.sha256(b"".join(pieces)).digest()
        writer.close()
        await nothing_left(listener)

    run(app, body)


async def until(condition: Callable[[], bool]) -> None:
    """Poll the event loop's state (bounded) until ``condition`` holds."""
    for _ in range(5000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the relay did not get there in 5 s")


def test_the_lane_stops_at_a_full_write_buffer_and_a_new_one_takes_over_after_the_drain(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """A browser that reads nothing for a while: the lane writes until the browser's
    write buffer is full, then gives the connection back to the task, which waits for
    the drain (the app's next bytes wait in its channel, bounded); once the browser
    reads, a new lane carries the rest and every byte arrives in order."""
    turn = threading.Semaphore(0)
    pieces = [bytes([65 + index]) * 64_000 for index in range(8)]

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        app.read_request(conn)
        conn.sendall(STREAM_HEAD)
        for piece in pieces:
            assert turn.acquire(timeout=10)
            conn.sendall(chunk(piece))
        assert turn.acquire(timeout=10)
        conn.sendall(b"0\r\n\r\n")

    app = scripted(script)

    async def body(listener: AppListener, port: int, host: bytes, apps: list[Channel]) -> None:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        await until(lambda: bool(listener.connections))
        (channel,) = listener.connections
        assert channel.transport is not None
        channel.transport.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDBUF, 16384
        )
        sock.sendall(b"GET /events HTTP/1.1\r\n" + host + b"\r\n")  # and nothing read
        await until(lambda: bool(apps) and isinstance(apps[0].lane, BodyLane))
        first = apps[0].lane
        for _ in pieces:
            turn.release()
        await until(channel.send_waits)
        assert apps[0].lane is None  # the first lane stopped; the task waits to drain
        reader, writer = await asyncio.open_connection(sock=sock)
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        reading = asyncio.ensure_future(dechunked(reader))
        await until(lambda: isinstance(apps[0].lane, BodyLane) and apps[0].lane is not first)
        turn.release()
        assert await asyncio.wait_for(reading, 10) == b"".join(pieces)
        writer.close()

    run(app, body)


def test_a_browser_gone_mid_stream_ends_the_exchange_and_its_app_connection(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    def script(conn: socket.socket, app: ScriptedApp) -> None:
        app.read_request(conn)
        conn.sendall(STREAM_HEAD + chunk(b"data: 0\n\n"))
        app.go.wait(10)
        for _ in range(100):  # until the relay's close makes a send fail
            conn.sendall(chunk(b"data: more\n\n"))
            if app.closed_by_relay.wait(0.05):
                return

    app = scripted(script)

    async def body(listener: AppListener, port: int, host: bytes, apps: list[Channel]) -> None:
        _, writer = await stream_started(port, host, b"data: 0\n\n", apps)
        writer.close()
        await writer.wait_closed()
        app.go.set()
        await nothing_left(listener)
        assert apps[0].at_end() or apps[0].transport is None or apps[0].transport.is_closing()

    run(app, body)


def test_a_browser_reset_while_the_app_is_silent_ends_the_exchange_at_once(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """An event stream whose app sends nothing for a while and whose browser resets its
    connection: the exchange ends at the reset (the app connection is closed, the
    connection's place given back), not at the app's next piece or after the response
    timeout (300 s here), as it did while the task waited on the app's reads."""

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        app.read_request(conn)
        conn.sendall(STREAM_HEAD + chunk(b"data: 0\n\n"))
        app.read_request(conn)  # silent; returns once the relay closes the connection

    app = scripted(script)

    async def body(listener: AppListener, port: int, host: bytes, apps: list[Channel]) -> None:
        _, writer = await stream_started(port, host, b"data: 0\n\n", apps)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # a reset
        assert await asyncio.to_thread(app.closed_by_relay.wait, 10)
        await nothing_left(listener)

    run(app, body, response_timeout=300)


def test_a_close_delimited_stream_ends_with_the_apps_close(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """No length and no chunks from the app: its close ends the body. The lane hands that
    end of stream to the task, which ends the browser's chunked body properly."""

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        app.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nfirst ")
        app.go.wait(10)
        conn.sendall(b"second")
        conn.shutdown(socket.SHUT_WR)
        app.read_request(conn)

    app = scripted(script)

    async def body(listener: AppListener, port: int, host: bytes, apps: list[Channel]) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /log HTTP/1.1\r\n" + host + b"\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert b"Transfer-Encoding: chunked\r\n" in head
        await read_exactly(reader, chunk(b"first "))
        assert isinstance(apps[0].lane, BodyLane)
        app.go.set()
        await read_exactly(reader, chunk(b"second") + b"0\r\n\r\n")
        writer.close()
        await nothing_left(listener)

    run(app, body)
