"""The transport for a socket whose open file the sandbox shares: no call of it waits,
whatever the other holder sets on the file, and it keeps asyncio's flow control."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Iterator

import pytest
import uvloop

from sandbridge.aio.shared_socket_transport import HIGH_WATER, SharedSocketTransport


class Recorder(asyncio.Protocol):
    """What the transport told its protocol, and futures for the moments tests wait on."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.data = bytearray()
        self.eof = loop.create_future()
        self.lost: asyncio.Future[Exception | None] = loop.create_future()
        self.paused = loop.create_future()
        self.resumed = loop.create_future()
        self.received = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.data += data
        self.received.set()

    def eof_received(self) -> bool:
        self.eof.set_result(None)
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set_result(exc)

    def pause_writing(self) -> None:
        if not self.paused.done():
            self.paused.set_result(None)

    def resume_writing(self) -> None:
        if not self.resumed.done():
            self.resumed.set_result(None)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected TCP pair on loopback: (the host's side, the app's side)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        host = socket.create_connection(listener.getsockname())
        app, _ = listener.accept()
    yield host, app
    host.close()
    app.close()


def run(coroutine: object) -> None:
    uvloop.run(asyncio.wait_for(coroutine, 10))  # type: ignore[arg-type]


def keep_clearing_nonblock(fd: int, stop: threading.Event) -> threading.Thread:
    """What a sandbox does through its copy of the open file: O_NONBLOCK off, again."""

    def clear() -> None:
        while not stop.wait(0.001):
            os.set_blocking(fd, True)

    thread = threading.Thread(target=clear, daemon=True)
    thread.start()
    return thread


def test_writes_and_reads_never_wait_when_another_holder_makes_the_file_blocking(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    host, _ = pair  # the app never reads
    shared = host.dup()  # the sandbox's copy: the same open file

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        transport_sock = host.dup()
        transport_sock.setblocking(False)
        protocol = Recorder()
        transport = SharedSocketTransport(loop, transport_sock, protocol)
        stop = threading.Event()
        clearing = keep_clearing_nonblock(shared.fileno(), stop)
        try:
            while not os.get_blocking(host.fileno()):  # until the other holder is at it
                await asyncio.sleep(0)
            ticks = 0
            for _ in range(256):  # 16 MiB toward a peer that reads nothing
                transport.write(b"x" * 65536)
                await asyncio.sleep(0)
                ticks += 1
            assert ticks == 256
            assert protocol.paused.done()
            assert transport.get_write_buffer_size() > 8 * 1024 * 1024
            transport.resume_reading()  # a read with nothing to read returns too
            transport.abort()
            assert await protocol.lost is None
        finally:
            stop.set()
            clearing.join()

    run(scenario())
    shared.close()


def test_a_buffered_write_is_sent_as_the_peer_reads_and_the_protocol_resumed(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    host, app = pair
    body = os.urandom(512 * HIGH_WATER + 12345)  # 32 MiB: more than loopback buffers take
    received = bytearray()

    def read_all() -> None:
        while len(received) < len(body) and (chunk := app.recv(1 << 20)):
            received.extend(chunk)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        host.setblocking(False)
        protocol = Recorder()
        transport = SharedSocketTransport(loop, host, protocol)
        for start in range(0, len(body), 65536):
            transport.write(body[start : start + 65536])
        assert protocol.paused.done()  # more than the kernel takes at once
        await asyncio.to_thread(read_all)
        await protocol.resumed
        assert transport.get_write_buffer_size() == 0

    run(scenario())
    assert bytes(received) == body


def test_data_then_end_of_stream_reach_the_protocol_and_write_eof_half_closes(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    host, app = pair

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        host.setblocking(False)
        protocol = Recorder()
        transport = SharedSocketTransport(loop, host, protocol)
        app.sendall(b"hello")
        app.shutdown(socket.SHUT_WR)
        await protocol.eof
        assert bytes(protocol.data) == b"hello"
        assert not transport.is_closing()  # the other direction stays open
        transport.write(b"bye")
        transport.write_eof()
        app.setblocking(False)
        assert await loop.sock_recv(app, 16) == b"bye"
        assert await loop.sock_recv(app, 16) == b""
        transport.close()
        assert await protocol.lost is None

    run(scenario())


def test_close_sends_what_is_buffered_first_and_abort_drops_it(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    host, app = pair

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        host.setblocking(False)
        protocol = Recorder()
        transport = SharedSocketTransport(loop, host, protocol)
        transport.write(b"last words")
        transport.close()
        assert transport.is_closing()
        transport.write(b"ignored after close")
        assert await protocol.lost is None
        app.setblocking(False)
        received = b""
        while chunk := await loop.sock_recv(app, 64):
            received += chunk
        assert received == b"last words"

    run(scenario())


def test_a_reset_by_the_peer_is_the_protocols_connection_lost_with_the_error(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    host, app = pair

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        host.setblocking(False)
        protocol = Recorder()
        SharedSocketTransport(loop, host, protocol)
        app.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        app.close()  # linger 0: a reset
        assert isinstance(await protocol.lost, ConnectionResetError)

    run(scenario())
