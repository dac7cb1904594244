"""App connections left idle by finished browser connections, kept briefly for the next.

A browser connection's first request otherwise opens its own app connection through
the shim (connect to ``upstream.sock``, the opening line, the shim's connect to the
app and the descriptor handoff), which is most of the time to the first byte on a new
connection. When a browser connection ends between two exchanges, its app connection
(idle, its last response read to the end, the app keeping it) waits here for up to
``idle_seconds``, and the next browser connection of the same app takes it.

What keeps this safe:

- only a connection with nothing in flight and nothing unread is parked
  (:meth:`~sandbridge.relay.host.upstream.UpstreamConnection.parkable`), and one that the app
  closed or wrote to while parked is never handed out (it is checked when taken);
- only requests that may be sent twice take a parked connection
  (:func:`may_retry`: a safe method, no body, no upgrade), and when the app closes the
  connection before answering (it timed out its own keep-alive at that moment) the
  request goes out once more on a new connection; any other request opens its own;
- the pool belongs to one app listener: a connection never serves another app, and
  every browser connection it serves is the owner's (the listener refuses others);
- at most ``size`` connections wait, for at most ``idle_seconds``: an app that serves
  one connection at a time (a single-threaded HTTP/1.1 server) is held by a parked
  connection no longer than that. (Browsers hold such an app far longer with their own
  keep-alive connections.)
"""

from __future__ import annotations

import asyncio
import collections

from sandbridge.protocol.http.forwarding import Framing, UpstreamRequest
from sandbridge.protocol.http.parser import RequestHead
from sandbridge.relay.host.upstream import UpstreamConnection

# Methods whose request may reach the app twice with the effect of once (RFC 9110 9.2.2,
# without PUT and DELETE: those carry bodies or change state that an app may count).
RETRYABLE_METHODS = frozenset({b"GET", b"HEAD", b"OPTIONS"})


def may_retry(head: RequestHead, request: UpstreamRequest) -> bool:
    """Whether this request may take a parked connection, and so be sent again on a new
    one if the app closes the parked one instead of answering."""
    return (
        head.method in RETRYABLE_METHODS and request.framing is Framing.NONE and not request.upgrade
    )


class AppConnectionPool:
    """The idle app connections of one app listener, newest first."""

    def __init__(self, size: int, idle_seconds: float) -> None:
        self._size = size
        self._idle_seconds = idle_seconds
        self._loop = asyncio.get_running_loop()
        # (deadline, connection), oldest on the left
        self._idle: collections.deque[tuple[float, UpstreamConnection]] = collections.deque()
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False

    def __len__(self) -> int:
        return len(self._idle)

    def park(self, upstream: UpstreamConnection) -> None:
        """Keep ``upstream`` for the next browser connection, or close it: a full pool
        drops its oldest, a closed pool or a connection not idle is closed at once."""
        if self._closed or self._size <= 0 or not upstream.parkable():
            upstream.channel.abort()
            return
        if len(self._idle) >= self._size:
            _, oldest = self._idle.popleft()
            oldest.channel.abort()
        self._idle.append((self._loop.time() + self._idle_seconds, upstream))
        if self._sweep is None:
            self._sweep = self._loop.call_at(self._idle[0][0], self._expire)

    def take(self) -> UpstreamConnection | None:
        """The newest parked connection that is still idle, or ``None``."""
        now = self._loop.time()
        while self._idle:
            deadline, upstream = self._idle.pop()
            if deadline > now and upstream.parkable():
                return upstream
            upstream.channel.abort()  # closed or written to by the app while it waited
        return None

    def close(self) -> None:
        """Close every parked connection; later ones are closed as they come."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        while self._idle:
            self._idle.pop()[1].channel.abort()

    def _expire(self) -> None:
        self._sweep = None
        now = self._loop.time()
        while self._idle and self._idle[0][0] <= now:
            self._idle.popleft()[1].channel.abort()
        # the ones the app closed meanwhile go too: their descriptors are freed now
        for entry in [entry for entry in self._idle if not entry[1].parkable()]:
            self._idle.remove(entry)
            entry[1].channel.abort()
        if self._idle:
            self._sweep = self._loop.call_at(self._idle[0][0], self._expire)
