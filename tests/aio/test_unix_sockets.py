"""The Pump protocol: forwarding both ways with half-close and backpressure."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

from sandbridge.aio import event_loop
from sandbridge.aio.unix_sockets import Pump, peer_credentials


async def _linked_pair() -> tuple[socket.socket, socket.socket, Pump, Pump]:
    """Two sockets whose traffic two linked pumps carry: ``left`` <-> ``right``."""
    loop = asyncio.get_running_loop()
    left, left_inner = socket.socketpair()
    right_inner, right = socket.socketpair()
    _, a = await loop.connect_accepted_socket(Pump, left_inner)
    _, b = await loop.connect_accepted_socket(Pump, right_inner)
    a.link(b)
    for sock in (left, right):
        sock.setblocking(False)
    return left, right, a, b


def test_bytes_cross_both_ways_and_a_half_close_keeps_the_other_way_open() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        left, right, a, b = await _linked_pair()
        await loop.sock_sendall(left, b"request")
        assert await loop.sock_recv(right, 100) == b"request"
        left.shutdown(socket.SHUT_WR)
        assert await loop.sock_recv(right, 100) == b""  # the half-close arrived
        await loop.sock_sendall(right, b"response")
        assert await loop.sock_recv(left, 100) == b"response"
        right.shutdown(socket.SHUT_WR)
        assert await loop.sock_recv(left, 100) == b""
        await asyncio.wait_for(asyncio.gather(a.lost, b.lost), 5)  # both ends closed
        assert a.peer is None and b.peer is None  # unlinked: refcounting frees them
        left.close()
        right.close()

    event_loop.run(main())


def test_a_peer_that_does_not_read_stops_reading_from_the_sender() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        left, right, a, b = await _linked_pair()
        assert a.transport is not None and b.transport is not None
        b.transport.set_write_buffer_limits(high=64 * 1024)
        chunk = b"x" * 65536
        # Send far more than the socket buffers hold while ``right`` reads nothing.
        sent = 0
        while a.transport.is_reading() and sent < 64 * 1024 * 1024:
            with contextlib.suppress(BlockingIOError):
                sent += left.send(chunk)
            await asyncio.sleep(0.001)
        assert not a.transport.is_reading()
        assert b.transport.get_write_buffer_size() < 1024 * 1024
        received = 0
        while received < sent:
            received += len(await loop.sock_recv(right, 1 << 20))
        assert received == sent
        assert a.transport.is_reading()  # drained: reading resumed
        a.abort()
        left.close()
        right.close()

    event_loop.run(main())


def test_a_failing_side_aborts_its_peer() -> None:
    async def main() -> None:
        left, right, a, b = await _linked_pair()
        a.abort()
        await asyncio.wait_for(b.lost, 5)
        left.close()
        right.close()

    event_loop.run(main())


def test_peer_credentials_are_the_connecting_process() -> None:
    one, other = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with one, other:
        assert peer_credentials(one) == (os.getpid(), os.getuid())
