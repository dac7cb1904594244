"""Connecting to an app in the sandbox from the event loop, by the one rule of
:mod:`sandbridge.protocol.app_address` (``127.0.0.1``, then ``::1`` where that refused).

Used by the event loop's shim (streams, handoffs, v1 exchanges) and by the host's own
sockets in the sandbox's network namespace (:mod:`.owned_upstream`). The light shim and
``--publish``'s probe walk the same :class:`~sandbridge.protocol.app_address.AppAttempts`
on their poll loop, ``sandbridge-open``'s probe blocking.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable

from sandbridge.aio import event_loop
from sandbridge.exceptions import AppUnreachable
from sandbridge.protocol.app_address import AppAddress, AppAttempts, host_for
from sandbridge.protocol.shim_opening import APP_CONNECT_TIMEOUT

# Makes the socket for one attempt: of the address's family, or (the socket minter's) a
# dual-stack IPv6 socket that reaches both.
NewSocket = Callable[[AppAddress], Awaitable[socket.socket]]


async def new_socket(address: AppAddress) -> socket.socket:
    """A non-blocking TCP socket of ``address``'s family, in this process's namespace."""
    return socket.socket(
        address.family, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC
    )


async def connect_app(port: int, make: NewSocket = new_socket) -> socket.socket:
    """A non-blocking socket connected to the app on ``port``, at the first of its
    loopback addresses that takes the connection; raises :class:`AppUnreachable`
    naming each address tried when none does."""
    attempts = AppAttempts(port)
    while True:
        address = attempts.address
        try:
            sock = await make(address)
        except OSError as exc:  # no IPv6 in this kernel, out of descriptors
            if attempts.failed(exc):
                continue
            raise AppUnreachable(attempts.error) from None
        host = host_for(sock.family, address)
        if host is None:
            sock.close()
            if attempts.skip("no IPv6 socket in the sandbox's namespace"):
                continue
            raise AppUnreachable(attempts.error)
        try:
            async with asyncio.timeout(APP_CONNECT_TIMEOUT):
                await connect_socket(sock, host, port)
        except (OSError, TimeoutError) as exc:
            sock.close()
            if attempts.failed(exc):
                continue
            raise AppUnreachable(attempts.error) from None
        except BaseException:
            sock.close()
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock


async def connect_socket(sock: socket.socket, host: str, port: int) -> None:
    """Connect the non-blocking ``sock`` to the numeric ``host`` and ``port``.

    Not ``loop.sock_connect``: uvloop's passes even a numeric address through
    ``getaddrinfo`` on its thread pool, a thread wake-up and back per connection (seen
    with ``strace`` on the shim: a futex wake and an eventfd read before each connect).
    """
    try:
        sock.connect((host, port))
        return
    except (BlockingIOError, InterruptedError):
        pass  # in progress: wait until the socket is writable, then ask how it went
    await event_loop.ready(sock, writable=True)
    error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if error:
        raise OSError(error, os.strerror(error))
