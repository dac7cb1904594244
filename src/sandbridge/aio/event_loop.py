"""The event loop sandbridge's processes run on.

uvloop (libuv) runs the relay's many small reads, writes and timers at a fraction of
the stdlib loop's cost per call; the profile of the host at 64 concurrent keep-alive
clients showed most of its time in the stdlib loop's transport and timer code.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

from sandbridge.aio.before_loop import keep_inherited_descriptors

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh uvloop event loop, after making every
    descriptor this process inherited close-on-exec
    (:func:`.before_loop.keep_inherited_descriptors`)."""
    keep_inherited_descriptors()
    return uvloop.run(main)


async def ready(sock: socket.socket, *, writable: bool = False) -> None:
    """Wait until the non-blocking ``sock`` is readable (or writable), for the socket
    calls the loop's own ``sock_*`` methods do not offer or do slowly (``recvmsg`` with
    descriptors; a connect without the loop's resolver)."""
    loop = asyncio.get_running_loop()
    woken = loop.create_future()

    def wake() -> None:
        if not woken.done():
            woken.set_result(None)

    fd = sock.fileno()
    if writable:
        loop.add_writer(fd, wake)
    else:
        loop.add_reader(fd, wake)
    try:
        await woken
    finally:
        if writable:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


def stop_signals() -> asyncio.Future[int]:
    """From now on, SIGINT and SIGTERM complete the returned future with the conventional
    exit status (128 + N) instead of killing the process: call it before saying ready, so
    that a signal right after never skips the cleanup."""
    loop = asyncio.get_running_loop()
    received: asyncio.Future[int] = loop.create_future()

    def on_signal(signum: int) -> None:
        if not received.done():
            received.set_result(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    return received
