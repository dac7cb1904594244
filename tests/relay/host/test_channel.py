"""A Channel hands over received bytes without copies, with bounded buffering."""

from __future__ import annotations

import asyncio
import socket

import pytest

from sandbridge.aio import event_loop
from sandbridge.relay.host.channel import Channel


async def _channel(limit: int = 1024) -> tuple[socket.socket, Channel]:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    _, channel = await asyncio.get_running_loop().connect_accepted_socket(
        lambda: Channel(limit), ours
    )
    return theirs, channel


def test_read_returns_what_arrived_then_empty_at_end_of_stream() -> None:
    async def main() -> None:
        peer, channel = await _channel()
        peer.send(b"hello")
        assert await channel.read() == b"hello"
        peer.shutdown(socket.SHUT_WR)
        assert await channel.read() == b""
        channel.abort()
        peer.close()

    event_loop.run(main())


def test_a_cancelled_read_loses_nothing() -> None:
    async def main() -> None:
        peer, channel = await _channel()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await channel.read()
        peer.send(b"later")
        assert await channel.read() == b"later"
        channel.abort()
        peer.close()

    event_loop.run(main())


def test_reading_pauses_past_the_limit_and_resumes_when_read() -> None:
    async def main() -> None:
        peer, channel = await _channel(limit=1024)
        assert channel.transport is not None
        peer.send(b"x" * 4096)
        while channel.transport.is_reading():
            await asyncio.sleep(0.001)
        assert len(await channel.read()) >= 1024
        assert channel.transport.is_reading()
        channel.abort()
        peer.close()

    event_loop.run(main())


def test_drain_fails_once_the_connection_is_gone() -> None:
    async def main() -> None:
        peer, channel = await _channel()
        peer.close()
        assert await channel.read() == b""
        channel.abort()
        await channel.closed
        with pytest.raises(ConnectionResetError):
            await channel.drain()

    event_loop.run(main())


def test_a_drain_the_peer_never_lets_end_fails_after_the_drain_timeout() -> None:
    async def main() -> None:
        peer, channel = await _channel()
        channel.drain_timeout = 0.2
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(ConnectionResetError, match=r"took nothing for 0\.2 s"):
            async with asyncio.timeout(10):  # (a drain without a timeout waits for good)
                while True:  # the peer reads nothing: the write buffer fills, then pauses
                    await channel.send(b"x" * 65536)
        waited = loop.time() - started
        # Never before the timeout, in the loop's own clock: uvloop counts in milliseconds,
        # so 0.2 s can read as 0.19999999999709 after the float arithmetic (the tolerance).
        assert 0.2 - 1e-6 <= waited < 5, waited
        channel.abort()
        peer.close()

    event_loop.run(main())


def test_a_drain_the_peer_lets_end_in_time_succeeds() -> None:
    async def main() -> None:
        peer, channel = await _channel()
        channel.drain_timeout = 5
        assert channel.transport is not None
        while not channel.transport.get_write_buffer_size():
            channel.write(b"x" * 65536)
        drained = asyncio.ensure_future(channel.send(b"y"))
        received = 0
        while not drained.done():
            try:
                received += len(peer.recv(1 << 20))
            except BlockingIOError:
                await asyncio.sleep(0.001)
        await drained
        assert received
        channel.abort()
        peer.close()

    event_loop.run(main())
