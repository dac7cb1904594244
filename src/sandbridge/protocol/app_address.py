"""Where an app in the sandbox is reached: the loopback addresses of its port, in order.

Why more than one: an app listens where its toolchain puts it. Most servers listen on
``127.0.0.1`` or ``0.0.0.0``, some on ``::`` (both families); but Node resolves
``localhost`` to ``::1`` first wherever ``/etc/hosts`` lists ``::1 localhost`` (Debian's
and Ubuntu's default), so ``npm run dev`` (Vite) listens on ``[::1]`` only. Every part
of the relay that connects to an app (both shims, the host's own sockets in the
sandbox's network namespace, ``--publish``'s probe, ``sandbridge-open``'s probe, the
handoff's check of a shim's socket) follows this one rule:

1. ``127.0.0.1`` first: the accepted contract's address, where a foreign shim connects
   (it keeps doing so alone: this rule is sandbridge's own shim's and host's);
2. ``::1`` next, only when ``127.0.0.1`` refused the connection (nothing listens there
   on that port). A timeout is an answer (an app whose accept queue is full): no
   second try.

Only loopback, only the port asked: the relay reaches nothing that a loopback client
inside the sandbox could not.

Sans-I/O and light: the light shim imports it; it imports ``errno`` and ``socket``'s
constants, nothing else.
"""

from __future__ import annotations

import errno
import socket
from typing import NamedTuple


class AppAddress(NamedTuple):
    """One loopback address an app may listen on, with its socket family."""

    family: int
    host: str

    def shown(self, port: int) -> str:
        """``127.0.0.1:5173`` or ``[::1]:5173``: the address as a URL would write it."""
        return f"[{self.host}]:{port}" if self.family == socket.AF_INET6 else f"{self.host}:{port}"


IPV4_LOOPBACK = AppAddress(socket.AF_INET, "127.0.0.1")
IPV6_LOOPBACK = AppAddress(socket.AF_INET6, "::1")
# In the order tried: the contract's address first.
APP_ADDRESSES = (IPV4_LOOPBACK, IPV6_LOOPBACK)
# The errors after which the next address is tried: nothing listens at this one.
NOT_LISTENING_HERE = frozenset({errno.ECONNREFUSED})
# IPv4-mapped IPv6 (RFC 4291 section 2.5.5.2): how a dual-stack socket writes an IPv4 peer.
_MAPPED_PREFIX = "::ffff:"


def host_for(family: int, address: AppAddress) -> str | None:
    """The host to connect a socket of ``family`` to, to reach ``address``: its own host
    for its own family, ``::ffff:127.0.0.1`` from a dual-stack IPv6 socket (what the
    socket minter makes), ``None`` where a socket of that family cannot reach it."""
    if family == address.family:
        return address.host
    if family == socket.AF_INET6 and address.family == socket.AF_INET:
        return _MAPPED_PREFIX + address.host
    return None


def peers(family: int) -> frozenset[str]:
    """The peer addresses an app connection of ``family`` may have (the handoff's check
    of a socket the shim hands over)."""
    return frozenset(
        host for address in APP_ADDRESSES if (host := host_for(family, address)) is not None
    )


class AppAttempts:
    """One connection's attempts to reach the app on ``port``: which address to try
    now, whether to try another after a failure, and what to say when none took it.

    ``address`` is the one to try; after a failure :meth:`failed` says whether there is
    a next one (``address`` then names it); when there is none, :attr:`error` says what
    every attempt met, naming each address tried."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._index = 0
        self._failures: list[str] = []

    @property
    def address(self) -> AppAddress:
        """The address to try now."""
        return APP_ADDRESSES[self._index]

    def failed(self, exc: BaseException) -> bool:
        """Record that the current address failed with ``exc`` (an ``OSError``, or a
        ``TimeoutError`` for a connect that never completed); True: try :attr:`address`
        next, False: give up and report :attr:`error`."""
        reason = str(exc) or "timed out"
        self._failures.append(f"connect to {self.address.shown(self.port)} failed: {reason}")
        moves_on = isinstance(exc, OSError) and exc.errno in NOT_LISTENING_HERE
        if moves_on and self._index + 1 < len(APP_ADDRESSES):
            self._index += 1
            return True
        return False

    def skip(self, reason: str) -> bool:
        """The current address cannot be tried at all (the socket at hand is of another
        family, or this kernel has no IPv6): as :meth:`failed`, always moving on."""
        self._failures.append(f"{self.address.shown(self.port)} not tried: {reason}")
        if self._index + 1 < len(APP_ADDRESSES):
            self._index += 1
            return True
        return False

    @property
    def error(self) -> str:
        """What the attempts met, one clause per address tried."""
        return "; ".join(self._failures)
