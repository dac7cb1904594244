"""A port number on both loopback addresses, for tests about which of them an app is on:
a port the kernel gave on one may be another test process's on the other."""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable


def on_ipv6_loopback_and(
    ipv4_side: Callable[[int], socket.socket],
) -> tuple[socket.socket, socket.socket]:
    """A port listening on ``::1``, and ``ipv4_side(port)`` on ``127.0.0.1``: a port free on
    ``::1`` may be taken on ``127.0.0.1`` by another test's process, so another is tried
    (a bounded number of times)."""
    for _ in range(20):
        v6 = socket.create_server(("::1", 0), family=socket.AF_INET6)
        try:
            return v6, ipv4_side(v6.getsockname()[1])
        except OSError as error:
            v6.close()
            if error.errno != errno.EADDRINUSE:
                raise
    raise AssertionError("no port free on both loopback addresses in 20 tries")


def bound_only(port: int) -> socket.socket:
    """``127.0.0.1:port`` bound, not listening: no other process can listen there, and it
    is no listener."""
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", port))
    except OSError:
        held.close()
        raise
    return held
