"""The relay's front door: a C thread serves new browser connections first.

Why: a new browser connection's first byte came 1.4-1.6x later through the relay than
through nginx's two hops, however the relay's Python was arranged, because the time is
the interpreter's and its event loop's, run cold at each new connection
(docs/architecture.md, "Why these parts exist"). :mod:`sandbridge.relay.front._front` (C, one thread
per event loop that serves app listeners) accepts the connections of public apps, checks
their owner as :mod:`sandbridge.relay.host.local_peer` does, and relays what it can state exactly:

- a request whose header block equals, byte for byte, one this relay's Python parsed,
  checked and translated before for the same listener, client address and method
  (:func:`request_block`; :meth:`FrontDoor.remember` hands it over with its
  translation), on an idle app connection of its own pool;
- the app's whole response when its head is in the strict subset the C reads and
  translates as :func:`~sandbridge.protocol.http.forwarding.build_browser_response`
  does, and keeps both connections alive.

A request it would relay when its pool has no idle app connection waits there, its
grace long at most, while the listener opens one and gives it over
(:meth:`FrontDoor.supply`, asked by a ``WANT`` handoff): a burst of new connections
stays the front's, where each would otherwise be the Python relay's for good.

Everything else, at any point, is handed to the listener here as if the Python relay
had read it itself (:meth:`~sandbridge.relay.listener.arrivals.Arrivals.adopt`): the browser's
bytes not yet sent, or a request sent whose response is unread. Only app connections
the host alone holds (``Channel.host_only``: made by the socket minter or in the host's
own namespace) go into the C pool, so no descriptor the sandbox shares reaches it.

The C is an accelerator that a machine without a compiler or Python's headers does not
build (pyproject.toml: an optional extension). It is imported on first use, never at this
module's import, and never with ``--no-front-door`` (:func:`serves` asks that first):
where it is missing every app is served by the Python relay and :func:`missing` says so
once, at ``-v`` (``front.off``), as ``sandbridge doctor`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import socket
from typing import TYPE_CHECKING, Protocol

from sandbridge import log
from sandbridge.protocol.http.forwarding import Framing, RequestFields
from sandbridge.protocol.http.origin_policy import SAFE_METHODS
from sandbridge.protocol.http.parser import Headers, RequestHead
from sandbridge.relay.host.budget import AppAccount, Handed
from sandbridge.relay.host.settings import RelaySettings, SessionScope
from sandbridge.relay.host.upstream import UpstreamConnection, UpstreamConnector

if TYPE_CHECKING:  # (the C is imported on first use only)
    from sandbridge.relay.front._front import Handoff, Held

# How long the front waits for an app's response before the Python relay takes the
# exchange over, its response timeout counted from then (a slow page, a long poll, SSE).
GRACE_SECONDS = 0.25
# What `sandbridge doctor` and the `front.off` event say to do where the C is missing.
BUILD_FIX = (
    "install a C compiler and Python's headers (Debian: apt-get install gcc python3-dev), "
    "then install sandbridge again"
)
# A field in the one form the C compares: a token name, a value without leading or
# trailing whitespace and without control characters (llhttp reads it back the same).
_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VALUE = re.compile(rb"(?:[\x21-\x7e\x80-\xff](?:[\x20-\x7e\x80-\xff\t]*[\x21-\x7e\x80-\xff])?)?")
# The methods the front relays (SAFE_METHODS but HEAD): the Origin rule lets them through.
FRONT_METHODS = frozenset({b"GET", b"OPTIONS"})
assert FRONT_METHODS < SAFE_METHODS


class Adopter(Protocol):
    """The listener side of a handoff (:class:`~sandbridge.relay.listener.arrivals.Arrivals`)."""

    def adopt(self, handoff: Handoff) -> None: ...

    def want_upstream(self) -> None: ...


@functools.cache
def missing() -> str | None:
    """Why the C front door is not on this machine (the import's error), or ``None``
    where it was built: imported on the first ask, which, where it is missing, says so
    once (at ``-v``)."""
    try:
        from sandbridge.relay.front import _front  # noqa: F401  (the import is the check)
    except ImportError as exc:
        log.debug("front.off", reason=str(exc), relay="python", fix=BUILD_FIX)
        return str(exc)
    return None


def request_block(headers: Headers, read_max: int) -> bytes | None:
    """The header block the C compares a browser's block with, for ``headers`` as
    llhttp read them; ``None`` if any field is not in the one form it compares or it is
    not shorter than ``read_max`` (the C's read)."""
    parts = []
    for name, value in headers:
        if _NAME.fullmatch(name) is None or _VALUE.fullmatch(value) is None:
            return None
        parts.append(name + b": " + value + b"\r\n")
    parts.append(b"\r\n")
    block = b"".join(parts)
    return block if len(block) < read_max else None  # (a longer one is never the front's)


class FrontDoor:
    """The C front of one event loop's app listeners (made by :func:`front_door`). It
    holds connections within the places their session's budget lends it
    (:mod:`.budget`: :meth:`lease`, :meth:`give_back`, :meth:`adopted`) and counts
    nothing else."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        from sandbridge.relay.front import _front  # (missing() said it is here)

        self._loop = loop
        self._native = _front.Front(owner=os.geteuid())
        self._read_max = _front.READ_MAX
        self._want = _front.WANT
        self._adopters: dict[int, Adopter] = {}
        loop.add_reader(self._native.fileno(), self._drain)

    def add(
        self,
        sock: socket.socket,
        adopter: Adopter,
        base_path: str,
        scope: SessionScope,
        account: AppAccount,
    ) -> int:
        """Serve listening socket ``sock`` of an app at ``base_path`` of session
        ``scope`` (the front keeps a duplicate), lent what ``account``, the app's places
        in the session's budget, leaves free; its id."""
        try:
            lid = self._add(sock, base_path, scope)
        except OSError:
            if not self._adopters:
                self.close()
            raise
        self._adopters[lid] = adopter
        account.served(self, lid)
        return lid

    def _add(self, sock: socket.socket, base_path: str, scope: SessionScope) -> int:
        settings = scope.settings
        lid: int = self._native.add_listener(
            fd=sock.fileno(),
            port=sock.getsockname()[1],
            base_path=base_path.encode("ascii"),
            pool_size=settings.pool_size,
            pool_idle=settings.pool_idle_seconds,
            keepalive=settings.keepalive_timeout,
            grace=GRACE_SECONDS,
            room=0,  # (lent by the budget once added: AppAccount.served)
            scope=scope.budget.key,
            scope_room=scope.budget.session.leased,
        )
        return lid

    def remove(self, lid: int) -> None:
        """Close what the front holds of listener ``lid``; the last one stops it."""
        self._native.remove_listener(lid)
        self._adopters.pop(lid, None)
        if not self._adopters:
            self.close()

    def adopted(self, handoff: Handed, *, kept: bool) -> bool:
        """The relay has a connection the front handed over counted: ``kept``, it counts
        it now (its place leaves the lease with it); else it closed it (its place is the
        lease's again). ``False``: not counted here (any more: its listener is gone)."""
        if not handoff.counted:
            return False
        counted: bool = self._native.adopted(handoff.listener, handoff.generation, kept)
        return counted

    def lease(self, key: int, lid: int, room: int, session_room: int) -> None:
        """What session ``key``'s budget lends the front: ``room`` places for listener
        ``lid`` (-1: none) and ``session_room`` for the session's listeners together."""
        self._native.lease(key, lid, room, session_room)

    def give_back(self, key: int, lid: int) -> bool:
        """One place of session ``key``'s lease, and of listener ``lid``'s (-1: the
        session's only), that no connection here uses, back to the budget; ``False``:
        the front uses all it was lent."""
        given: bool = self._native.give_back(key, lid)
        return given

    def held(self, lid: int) -> Held:
        """What the front holds of listener ``lid`` (browser connections, parked app
        connections, exchanges relayed, connections handed over, the browser connections
        of its session's listeners together, and the two leases)."""
        return self._native.held(lid)

    def park_upstream(
        self, lid: int, upstream: UpstreamConnection, elsewhere: int, size: int
    ) -> bool:
        """Close an idle app connection when the two pools, the front's and the relay's
        (``elsewhere`` parked there), hold ``size`` (``--app-pool-size``) together; else
        park it in the front's pool if the host alone holds it (the front keeps a
        duplicate; this one is closed); ``False``: the relay's pool takes it. So the one
        size bounds both pools together, never each."""
        if elsewhere + self.held(lid).pooled >= size:
            upstream.channel.abort()
            return True
        return self._park(lid, upstream, opened=False) is True

    def supply(self, lid: int, upstream: UpstreamConnection | None) -> bool:
        """An idle app connection for the front's oldest request of listener ``lid``
        that waits for one (a ``WANT`` handoff asked for it): the front keeps a duplicate
        (this one is closed) and sends the request on it. ``None``, or one the front may
        not hold (the sandbox may share it): that request is the relay's now. ``False``:
        ``upstream`` is the caller's still."""
        # (False: none waits any more and the front's pool is full, or the front found it
        # not idle and gave the request to the relay itself)
        taken = None if upstream is None else self._park(lid, upstream, opened=True)
        if taken is None:
            self._native.park(lid, -1)
        return taken is True

    def _park(self, lid: int, upstream: UpstreamConnection, *, opened: bool) -> bool | None:
        """Give ``upstream`` to the front (:meth:`park_upstream`, :meth:`supply`): closed
        here once the front took it (it keeps a duplicate); ``None``: one it may not hold
        (not the host's alone, or not idle)."""
        channel, transport = upstream.channel, upstream.channel.transport
        sock = None if transport is None else transport.get_extra_info("socket")
        if not (channel.host_only and sock is not None and upstream.parkable()):
            return None
        taken: bool = self._native.park(lid, sock.fileno(), opened)
        if taken:
            channel.abort()
        return taken

    def remember(
        self, lid: int, client_host: str, head: RequestHead, fields: RequestFields
    ) -> None:
        """A request the relay checked and translated: the front relays the same block
        from the same client the same way. Only what needs nothing but the block: a safe
        method (the Origin rule passes it whatever the session's origins) but ``HEAD``
        (after which the relay never reuses the app connection), no body, no upgrade,
        keep-alive HTTP/1.1."""
        if (
            head.method not in FRONT_METHODS
            or head.upgrade
            or not head.keep_alive
            or head.version != "1.1"
            or fields.framing is not Framing.NONE
        ):
            return
        try:
            address = socket.inet_aton(client_host)
        except OSError:
            return
        block = request_block(head.headers, self._read_max)
        if block is not None:
            self._native.remember(lid, address, head.method, block, fields.block)

    def close(self) -> None:
        with contextlib.suppress(ValueError, RuntimeError):
            self._loop.remove_reader(self._native.fileno())
        self._native.close()
        _doors.pop(self._loop, None)

    def _drain(self) -> None:
        try:
            handoffs = self._native.take()
        except MemoryError:  # (the C closed them and freed their places in the limits)
            log.warning("front.take_failed")
            return
        for handoff in handoffs:
            adopter = self._adopters.get(handoff.listener)
            if handoff.kind == self._want:  # no connection: a request asks for an app's
                if adopter is not None:
                    adopter.want_upstream()
                continue
            if adopter is None:  # (its listener is gone, and its count with it)
                close_handoff(handoff)
                self.adopted(handoff, kept=False)
                continue
            try:
                adopter.adopt(handoff)  # (it closes what it was given, whatever happens)
            except Exception as exc:  # nothing may escape into the event loop
                log.warning("front.adopt_failed", error=str(exc))


def close_handoff(handoff: Handoff) -> None:
    """Close a handoff's descriptors (its listener is gone)."""
    for fd in (handoff.browser_fd, handoff.app_fd):
        if fd >= 0:
            os.close(fd)


def serves(settings: RelaySettings, connector: UpstreamConnector) -> bool:
    """Whether the front door serves an app: a public app (a private app's token and
    cookie are the Python relay's) of a session whose app connections the host alone
    holds (the socket minter: no descriptor the sandbox shares reaches the front), where
    the C was built (asked last: ``--no-front-door`` never imports it)."""
    return (
        settings.front_door
        and not settings.private
        and connector.owned is not None
        and missing() is None
    )


def listening_socket(port: int) -> socket.socket:
    """A listening socket on ``127.0.0.1:port`` (0: any free port) for the front door."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(512)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


_doors: dict[asyncio.AbstractEventLoop, FrontDoor] = {}


def front_door() -> FrontDoor:
    """The running loop's front door, made on first use."""
    loop = asyncio.get_running_loop()
    door = _doors.get(loop)
    if door is None:
        door = _doors[loop] = FrontDoor(loop)
    return door
