"""Awaiting raw descriptors (a PTY, a terminal, a socket pair) in the event loop."""

from __future__ import annotations

import asyncio
import os
import select


async def readable(fd: int) -> None:
    """Return once ``fd`` is readable (or at its end)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(fd, ready.set_result, None)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def writable(fd: int) -> None:
    """Return once ``fd`` has room for writing."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_writer(fd, ready.set_result, None)
    try:
        await ready
    finally:
        loop.remove_writer(fd)


async def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd``, waiting for room when it is non-blocking and full."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await writable(fd)


def hung_up(fd: int) -> bool:
    """Whether the peer of a Unix stream socket closed it whole, not only its sending
    side: after a half close (``shutdown(SHUT_WR)``) the kernel reports end of input
    but not POLLHUP; after the peer's close (its process gone included), both."""
    poller = select.poll()
    poller.register(fd, select.POLLHUP)
    return any(events & select.POLLHUP for _, events in poller.poll(0))


def client_end(writer: asyncio.StreamWriter, over_link: bool) -> str:
    """Why a control client's connection ended: ``link`` when serve-stdio's connection for
    a client on the laptop closed whole (the link or serve-stdio gone: it half-closes when
    the laptop's client left), else ``client``."""
    sock = writer.get_extra_info("socket")
    return "link" if over_link and sock is not None and hung_up(sock.fileno()) else "client"
