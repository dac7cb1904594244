"""An upgraded connection (a WebSocket) after its ``101``: :class:`Tunnel`."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

from sandbridge.aio.unix_sockets import Pump
from sandbridge.protocol.http.parser import Event, Upgraded
from sandbridge.relay.host.upstream import UpstreamConnection
from sandbridge.relay.listener.browser import BrowserConnection

# After one side of a tunnel (WebSocket) ends, the other gets this long to finish.
TUNNEL_CLOSE_GRACE = 2.0


class Tunnel:
    """Bytes copied both ways untouched by two linked pumps, with no task.

    A WebSocket mostly sits idle: with no task, no coroutine frames and no request state
    kept alive, what an open one costs is its two sockets and two small protocol objects
    (about 6 KiB per idle WebSocket, nginx's 34: docs/benchmarks.md). After one side
    ends, the other gets ``grace`` seconds to finish; then both are dropped.
    ``on_closed`` runs once both sockets are closed.
    """

    def __init__(
        self, browser_side: Pump, app_side: Pump, grace: float, on_closed: Callable[[], None]
    ) -> None:
        self._sides = (browser_side, app_side)
        self._grace = grace
        self._on_closed = on_closed
        self._timer: asyncio.TimerHandle | None = None
        for side in self._sides:
            side.finished.add_done_callback(self._side_finished)
            side.lost.add_done_callback(self._side_lost)

    def abort(self) -> None:
        """Drop both sockets now."""
        for side in self._sides:
            side.abort()

    def _side_finished(self, _: asyncio.Future[None]) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._grace, self.abort)

    def _side_lost(self, _: asyncio.Future[None]) -> None:
        if all(side.lost.done() for side in self._sides):
            if self._timer is not None:
                self._timer.cancel()
            self._on_closed()


def open_tunnel(
    browser: BrowserConnection,
    upstream: UpstreamConnection,
    upstream_events: collections.deque[Event],
    on_closed: Callable[[], None],
) -> Tunnel | None:
    """Copy bytes both ways after a 101, untouched, until either side ends.

    Both sockets move from their channels to a pair of :class:`Pump` protocols that
    forward from the event loop's read callbacks (one ``write`` per message, no task per
    direction), owned by a :class:`Tunnel` from then on; what either side sent after its
    head goes first. ``None`` if a side is already gone (nothing to tunnel).
    ``on_closed`` runs from a later callback, never from this call.
    """
    channel = browser.channel
    if channel.closed.done() or upstream.channel.closed.done():
        return None
    leftover = b""
    while browser.events:
        event = browser.events.popleft()
        if isinstance(event, Upgraded):
            leftover += event.trailing
    if leftover:
        upstream.channel.write(leftover)
    for event in upstream_events:
        if isinstance(event, Upgraded) and event.trailing:
            channel.write(event.trailing)

    browser_side, app_side = Pump(), Pump()
    browser_side.link(app_side)
    channel.hand_over(browser_side)
    upstream.channel.hand_over(app_side)
    tunnel = Tunnel(browser_side, app_side, TUNNEL_CLOSE_GRACE, on_closed)
    channel.catch_up(browser_side)
    upstream.channel.catch_up(app_side)
    return tunnel
