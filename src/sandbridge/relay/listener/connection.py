"""One browser connection's owner: :class:`Connection`.

A browser connection passes through several executors: the front door's thread, the read
callbacks of a doorstep (:mod:`.arrivals`) or of the lane (:mod:`.lane`), its task, and a
tunnel after a ``101``. The :class:`Connection` is the one object that stays with it
through all of them: it holds the connection's stage (:mod:`.connection_stage`) and is
the only thing that changes it (:meth:`Connection.move`, along the table), what its first
request left in flight before its task existed, and its task's body
(:meth:`Connection.serve`). Each move is a ``connection.stage`` trace event
(:data:`~sandbridge.log.TRACE`): the path a connection took. It exists exactly while the
connection counts against the limits: made when the connection is counted, and it
releases its place when it closes.

What it needs of its app listener is a small public protocol, :class:`Listener`.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Coroutine
from typing import Any, Protocol

from sandbridge import log
from sandbridge.aio.tasks import TaskSet
from sandbridge.aio.watchdog import Watchdog
from sandbridge.exceptions import HttpError
from sandbridge.protocol.http.forwarding import UpstreamRequest, error_response
from sandbridge.protocol.http.origin_policy import AppOrigin
from sandbridge.protocol.http.parser import RequestHead, RequestReader
from sandbridge.protocol.http.private_access import AccessGate
from sandbridge.relay.front.front import FrontDoor
from sandbridge.relay.host.budget import AppAccount
from sandbridge.relay.host.channel import Channel
from sandbridge.relay.host.settings import RelaySettings, SessionScope
from sandbridge.relay.host.upstream import UpstreamConnection, UpstreamConnector
from sandbridge.relay.listener.app_pool import AppConnectionPool
from sandbridge.relay.listener.browser import BrowserConnection
from sandbridge.relay.listener.connection_stage import INITIAL, Event, Stage, next_stage
from sandbridge.relay.listener.exchange_io import Exchange, admit, next_head
from sandbridge.relay.listener.lane import KeepAliveLane, LaneEnd, lane_can_start

# Request readers kept for new connections, per app.
SPARE_READERS = 16
# An exchange's outcome and the app connection the browser connection keeps after it.
Outcome = tuple[Exchange, UpstreamConnection | None]

_ids = itertools.count(1)


class SpareReaders:
    """Request readers finished connections left between two requests, for new ones."""

    def __init__(self) -> None:
        self._readers: list[RequestReader] = []

    def take(self) -> RequestReader | None:
        return self._readers.pop() if self._readers else None

    def give_back(self, browser: BrowserConnection) -> None:
        """A connection is over: its request reader serves a next one if it stands
        between two requests (:meth:`RequestReader.reusable`)."""
        parser = browser.parser
        if not browser.events and parser.reusable() and len(self._readers) < SPARE_READERS:
            parser.forget()
            self._readers.append(parser)


class Listener(Protocol):
    """What a connection, and the arrivals that bring it, use of its app listener
    (:class:`~sandbridge.relay.listener.app_listener.AppListener`): the app, its limits, its
    pool, its tasks, and the verbs of an exchange."""

    host_port: int
    port: int
    base_path: str
    origin: AppOrigin | None
    gate: AccessGate | None
    settings: RelaySettings
    scope: SessionScope
    front: FrontDoor | None
    front_id: int
    address: tuple[str, int]  # its own (every accepted connection's local address)
    pool: AppConnectionPool | None
    tasks: TaskSet
    readers: SpareReaders
    # the connections counted against its limits, by their browser channel, and its
    # places in its session's budget
    connections: dict[Channel, Connection]
    account: AppAccount
    connector: UpstreamConnector  # opens its app connections

    def release(self, channel: Channel) -> None: ...

    def park(self, upstream: UpstreamConnection) -> None: ...

    def exchange(  # noqa: PLR0913  (as AppListener.exchange)
        self,
        browser: BrowserConnection,
        head: RequestHead,
        request: UpstreamRequest,
        upstream: UpstreamConnection | None,
        lane: KeepAliveLane,
        sent: UpstreamConnection | None = None,
    ) -> Coroutine[Any, Any, Outcome]: ...

    def resume(
        self, browser: BrowserConnection, lane: KeepAliveLane, upstream: UpstreamConnection
    ) -> Coroutine[Any, Any, Outcome]: ...


class Connection:
    """One browser connection of an app listener, counted against its limits, from the
    moment it is counted until it closes (see the module's docstring)."""

    __slots__ = ("browser", "channel", "client_host", "id", "lane", "listener", "sent", "stage")

    def __init__(
        self, listener: Listener, channel: Channel, client_host: str, stage: Stage
    ) -> None:
        if stage not in INITIAL:
            raise ValueError(f"a connection starts in front or waiting, not {stage}")
        self.listener = listener
        self.channel = channel
        self.client_host = client_host
        self.id = next(_ids)
        self.stage = stage
        # Its request reader and translation of heads, and its lane: made when its
        # first bytes are read (arrivals' _start).
        self.browser: BrowserConnection | None = None
        self.lane: KeepAliveLane | None = None
        # The app connection its first request went out on before its task existed.
        self.sent: UpstreamConnection | None = None
        if log.tracing():
            log.trace("connection.stage", port=listener.host_port, conn=self.id, stage=stage.value)

    def move(self, event: Event) -> Stage:
        """The one place a connection's stage changes: along the table, or
        :class:`~sandbridge.exceptions.IllegalMove` (and nothing moves). Closing
        releases its place in the limits."""
        stage = self.stage = next_stage(self.stage, event)
        if log.tracing():  # (the fields cost more than the move: asked first)
            log.trace(
                "connection.stage",
                port=self.listener.host_port,
                conn=self.id,
                event=event.name.lower(),
                stage=stage.value,
            )
        if stage is Stage.CLOSED:
            self.listener.release(self.channel)
        return stage

    def close(self) -> None:
        """Closed, unless it is already (the listener's close, then its task's end)."""
        if self.stage is not Stage.CLOSED:
            self.move(Event.CLOSE)

    def start_task(self) -> None:
        """Its task takes it from here (:meth:`serve`), owned by its listener."""
        self.move(Event.START_TASK)
        task = self.listener.tasks.spawn(self.serve())
        assert self.browser is not None and self.lane is not None
        self.browser.watchdog = Watchdog(task)  # before the task or the lane can use it
        sent, lane = self.sent, self.lane
        if sent is not None:  # a task cancelled before it ran (close()) drops it too
            task.add_done_callback(lambda _: lane.drop(sent))

    async def serve(self) -> None:  # noqa: PLR0912, PLR0915  (a browser connection's whole life, lane and task, read top to bottom)
        """Its task: its requests, one exchange after another, the small ones between
        two requests relayed by the lane (``keep-alive``), until it closes or a tunnel
        takes it."""
        listener, browser, lane = self.listener, self.browser, self.lane
        assert browser is not None and lane is not None
        scope, settings, channel = listener.scope, listener.settings, self.channel
        heads = browser.heads
        assert channel.transport is not None
        sent, self.sent = self.sent, None
        upstream: UpstreamConnection | None = None
        tunnelled = False
        try:
            while True:
                if sent is not None:
                    head, request = lane.head, lane.request
                    assert head is not None and request is not None
                    exchange, upstream = await listener.exchange(
                        browser, head, request, None, lane, sent
                    )
                    sent = None
                    if not exchange.keep_browser:
                        break
                    continue
                if upstream is not None and lane_can_start(browser, upstream):
                    self.move(Event.ENTER_LANE)
                    end = await lane.run(upstream)
                    self.move(Event.LEAVE_LANE)
                    if end is LaneEnd.IDLE_TIMEOUT:
                        break
                    if end is LaneEnd.ERROR:
                        assert lane.error is not None
                        raise lane.error
                    if end is LaneEnd.DONE:
                        if not lane.reuse_upstream:
                            upstream.channel.abort()
                            upstream = None
                        if not lane.keep_browser:
                            break
                        await channel.drain()
                        continue
                    if end in (
                        LaneEnd.CONTINUE,
                        LaneEnd.RESPONSE_TIMEOUT,
                        LaneEnd.UPSTREAM_FAILED,
                    ):
                        exchange, upstream = await listener.resume(browser, lane, upstream)
                        if not exchange.keep_browser:
                            break
                        continue
                event = await next_head(browser, settings)
                if event is None:
                    break
                if not isinstance(event, RequestHead):
                    raise HttpError(400, "request body without a request")
                if listener.gate is not None and not await admit(
                    browser, listener.gate, event, settings.header_timeout
                ):
                    if not event.keep_alive:
                        break  # (its 303 said Connection: close)
                    continue
                request = heads.request(event, scope.origins)
                exchange, upstream = await listener.exchange(
                    browser, event, request, upstream, lane
                )
                if exchange.tunnelled:
                    tunnelled = True  # the connection lives on in a Tunnel
                    break
                if not exchange.keep_browser:
                    break
        except HttpError as exc:
            log.debug(
                "request.refused", port=listener.host_port, status=exc.status, reason=str(exc)
            )
            with contextlib.suppress(OSError):
                await browser.send(error_response(exc.status, str(exc)))
                await channel.linger_close()
        except OSError:
            pass
        finally:
            browser.watchdog.close()
            if upstream is not None:
                listener.park(upstream)
            if not tunnelled:
                listener.readers.give_back(browser)
                channel.abort() if channel.transport.is_closing() else channel.close()
                try:
                    # A browser reading nothing holds its close for at most a while, and
                    # its place in the limits meanwhile: such closes cannot pile up.
                    await channel.wait_closed()
                finally:
                    self.close()
