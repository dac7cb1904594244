"""An upgraded connection (a WebSocket) after its ``101``: :class:`Tunnel` (two pumps in
the event loop) or, where the C module is built, :class:`NativeTunnel` (a thread copies,
:mod:`sandbridge.relay.front._tunnel`)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import os
import weakref
from collections.abc import Callable
from types import ModuleType

from sandbridge.aio.unix_sockets import Pump
from sandbridge.protocol.http.parser import Event, Upgraded
from sandbridge.relay.host.channel import Channel
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
        self._reported = False  # (both sides' lost callbacks may see both sides lost)
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
        if not self._reported and all(side.lost.done() for side in self._sides):
            self._reported = True
            if self._timer is not None:
                self._timer.cancel()
            self._on_closed()


@functools.cache
def native() -> ModuleType | None:
    """The C tunnel (:mod:`sandbridge.relay.front._tunnel`), or ``None`` where it was not built
    (the pumps then carry every tunnel: the same bytes, more of the event loop's time)."""
    try:
        from sandbridge.relay.front import _tunnel

        _tunnel.start()  # (its thread, once: one that cannot start leaves it to the pumps)
    except (ImportError, OSError):
        return None
    return _tunnel


# The C tunnels open, by id, with the loop that waits for their end.
_open: dict[int, tuple[asyncio.AbstractEventLoop, NativeTunnel]] = {}
# The loops that read the C thread's eventfd (one, but for tests that run several).
_watching: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def _report_closed(module: ModuleType) -> None:
    """The C thread's eventfd is readable: run the ended tunnels' ``on_closed``, each in
    the loop it was opened in."""
    running = asyncio.get_running_loop()
    for tunnel_id in module.closed():
        loop, tunnel = _open.pop(tunnel_id, (None, None))
        if loop is None or tunnel is None:
            continue
        if loop is running:
            tunnel.ended()
        elif not loop.is_closed():
            loop.call_soon_threadsafe(tunnel.ended)


class NativeTunnel:
    """Bytes copied both ways by the C thread of :mod:`sandbridge.relay.front._tunnel`, by the
    rules of :class:`Tunnel` (half closes passed on, ``grace`` after the first end,
    backpressure, an error drops both), with no Python per message. Both sockets are the
    thread's; ``on_closed`` runs in the event loop once it has closed them."""

    def __init__(
        self,
        module: ModuleType,
        channels: tuple[Channel, Channel],
        grace: float,
        on_closed: Callable[[], None],
    ) -> None:
        loop = asyncio.get_running_loop()
        notify = module.start()
        if loop not in _watching:
            loop.add_reader(notify, _report_closed, module)
            _watching.add(loop)
        self._module = module
        self._channels = channels
        self._on_closed = on_closed
        self._id = -1  # the thread's id of it, once it has it
        fds = [channel.release() for channel in channels]
        try:
            self._id = module.add(fds[0], fds[1], grace)
        except Exception:
            # (never in practice: the thread's table is full or epoll failed) the
            # sockets are ours again: dropped, as the pumps drop a failing tunnel.
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            loop.call_soon(self.ended)
            return
        _open[self._id] = (loop, self)

    def abort(self) -> None:
        """Drop both sockets now (``on_closed`` follows from the event loop)."""
        if self._id >= 0:
            self._module.abort(self._id)

    def ended(self) -> None:
        """The thread closed both sockets: the channels and the owner learn it."""
        for channel in self._channels:
            channel.closed_elsewhere()
        self._on_closed()


def open_tunnel(
    browser: BrowserConnection,
    upstream: UpstreamConnection,
    upstream_events: collections.deque[Event],
    on_closed: Callable[[], None],
    use_native: bool = True,
) -> Tunnel | NativeTunnel | None:
    """Copy bytes both ways after a 101, untouched, until either side ends.

    What either side sent after its head goes first. Then both sockets go to the C
    thread (:class:`NativeTunnel`) where it is built and ``use_native``, and nothing is
    left in either channel that only its transport could pass on (unsent bytes, an end
    already read); else to a pair of :class:`Pump` protocols that forward from the event
    loop's read callbacks (one ``write`` per message, no task per direction), owned by a
    :class:`Tunnel` from then on. ``None`` if a side is already gone (nothing to
    tunnel). ``on_closed`` runs from a later callback, never from this call.
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
    module = native() if use_native else None
    if module is not None and channel.releasable() and upstream.channel.releasable():
        return NativeTunnel(module, (channel, upstream.channel), TUNNEL_CLOSE_GRACE, on_closed)

    browser_side, app_side = Pump(), Pump()
    browser_side.link(app_side)
    channel.hand_over(browser_side)
    upstream.channel.hand_over(app_side)
    tunnel = Tunnel(browser_side, app_side, TUNNEL_CLOSE_GRACE, on_closed)
    channel.catch_up(browser_side)
    upstream.channel.catch_up(app_side)
    return tunnel
