"""A Channel hands over received bytes without copies, with bounded buffering."""

from __future__ import annotations

import asyncio
import socket

import pytest

from sandbridge.aio import event_loop
from sandbridge.relay.channel import Channel


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
