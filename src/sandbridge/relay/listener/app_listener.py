"""The per-app host listener: the relay's data path.

One browser connection gets at most one upstream Unix connection at a time (stream
mode), reused across keep-alive requests. Per request:

1. read and validate the head (llhttp plus :mod:`sandbridge.protocol.http.forwarding`);
2. send the normalised head to the app through the shim;
3. pump the request body while relaying the response, chunk by chunk, each write
   awaited (``drain``) so backpressure reaches the sender and memory stays at one
   read buffer per direction;
4. after a ``101`` to an upgrade request, copy bytes both ways untouched.

A failure on the sandbox side is a ``502`` for that request only. After a connection's
first exchange, small exchanges run the same steps from the read callbacks instead of
the connection's task (:class:`~sandbridge.relay.listener.lane.KeepAliveLane`); both relay a final
response as :func:`~sandbridge.protocol.http.exchange.decide_response` says.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import socket

from sandbridge import log
from sandbridge.aio.tasks import TaskSet
from sandbridge.exceptions import HttpError, UpstreamError
from sandbridge.protocol.http.exchange import ResponseDecision, decide_response
from sandbridge.protocol.http.forwarding import (
    Framing,
    UpstreamRequest,
    build_browser_response,
)
from sandbridge.protocol.http.origin_policy import AppOrigin
from sandbridge.protocol.http.parser import (
    MESSAGE_END,
    BodyChunk,
    Event,
    RequestHead,
    ResponseHead,
)
from sandbridge.protocol.http.private_access import AccessGate
from sandbridge.relay.front.front import FrontDoor, front_door, listening_socket, serves
from sandbridge.relay.host import local_peer
from sandbridge.relay.host.app import App
from sandbridge.relay.host.channel import READ_BYTES, Channel
from sandbridge.relay.host.settings import SessionScope
from sandbridge.relay.host.upstream import UpstreamConnection, UpstreamConnector
from sandbridge.relay.listener.app_pool import AppConnectionPool, may_retry
from sandbridge.relay.listener.arrivals import Arrivals
from sandbridge.relay.listener.body_lane import lane_ready, relay_body
from sandbridge.relay.listener.browser import BrowserConnection
from sandbridge.relay.listener.connection import Connection, Outcome, SpareReaders
from sandbridge.relay.listener.connection_stage import Event as StageEvent
from sandbridge.relay.listener.exchange_io import (
    Exchange,
    bad_gateway,
    finish_body,
    no_response,
    pump_request_body,
    read_awaiting_response,
    read_response_body,
)
from sandbridge.relay.listener.lane import KeepAliveLane, LaneEnd
from sandbridge.relay.listener.tunnel import NativeTunnel, Tunnel, open_tunnel
from sandbridge.relay.listener.v1_exchange import exchange_v1


def _may_go_twice(browser: BrowserConnection, head: RequestHead, request: UpstreamRequest) -> bool:
    """Whether the request may go on a reused app connection, and so once more on a new one
    if the app closes that one unanswered: one the pool's rule lets go twice
    (:func:`may_retry`), read whole (its end is next)."""
    return may_retry(head, request) and bool(browser.events) and browser.events[0] is MESSAGE_END


class AppListener:
    """Serves one app's host origin: ``127.0.0.1:<host_port>``, named ``<label>.localhost``
    (:class:`~sandbridge.protocol.http.origin_policy.AppOrigin`)."""

    def __init__(
        self,
        port: int,
        base_path: str,
        connector: UpstreamConnector,
        scope: SessionScope | None = None,
    ) -> None:
        self.port = port
        self.base_path = base_path
        self.connector = connector
        self.scope = SessionScope() if scope is None else scope
        self.settings = self.scope.settings
        # This app's places in its session's connection budget (relay/host/budget.py).
        self.account = self.scope.budget.open()
        self.gate: AccessGate | None = None
        self.host_port = 0
        self.address = ("127.0.0.1", 0)
        self.origin: AppOrigin | None = None
        self._server: asyncio.Server | None = None
        # The browser connections counted against the limits, by their channel.
        self.connections: dict[Channel, Connection] = {}
        self._tunnels: set[Tunnel | NativeTunnel] = set()
        # One task per browser connection, owned here: close() ends them.
        self.tasks = TaskSet()
        # App connections left idle by finished browser connections (start() makes it).
        self.pool: AppConnectionPool | None = None
        self.readers = SpareReaders()
        # How new connections reach their tasks (start() makes it).
        self._arrivals: Arrivals | None = None
        # The C front door that accepts this listener's connections (relay/front/front.py),
        # its id there and the listening socket, where it serves this app.
        self.front: FrontDoor | None = None
        self.front_id = -1
        self._front_socket: socket.socket | None = None

    @property
    def app(self) -> App:
        assert self.origin is not None, "start() names the app"
        url = self.origin.url(self.base_path) + self.url_suffix
        return App(self.port, self.base_path, self.host_port, url, self.origin.hostname)

    async def start(self, origin: AppOrigin | None = None) -> int:
        """Bind a new loopback port, or ``origin``'s (an app back after a restart) if free."""
        loop = asyncio.get_running_loop()
        local_peer.shared_owners()
        port = 0 if origin is None else origin.host_port
        self._arrivals = Arrivals(self)
        front = serves(self.settings, self.connector)
        try:
            if front:
                self._front_socket = listening_socket(port)
                self.host_port = self._front_socket.getsockname()[1]
            else:
                self._server = await loop.create_server(
                    lambda: Channel(READ_BYTES, on_made=self._accept),
                    "127.0.0.1",
                    port,
                    backlog=512,
                )
        except OSError:
            if origin is None:
                raise
            return await self.start()
        if self._server is not None:
            if not self._server.sockets:
                # asyncio skips an address whose socket() fails (taking it for an
                # unsupported family), so out of descriptors it gives a server listening
                # nowhere.
                self._server.close()
                self._server = None
                raise OSError(
                    errno.EMFILE, "no socket could be made for 127.0.0.1 (out of descriptors?)"
                )
            self.host_port = self._server.sockets[0].getsockname()[1]
        self.address = ("127.0.0.1", self.host_port)  # every accepted connection's own
        self.pool = AppConnectionPool(self.settings.pool_size, self.settings.pool_idle_seconds)
        if self._front_socket is not None:
            try:
                self.front = front_door()
                self.front_id = self.front.add(
                    self._front_socket, self._arrivals, self.base_path, self.scope, self.account
                )
            except OSError as exc:  # the front serves no more listeners: the event loop does
                log.warning("front.unavailable", port=self.host_port, error=str(exc))
                self.front, sock, self._front_socket = None, self._front_socket, None
                self._server = await loop.create_server(
                    lambda: Channel(READ_BYTES, on_made=self._accept), sock=sock, backlog=512
                )
        self.origin = origin or AppOrigin.new(self.host_port, self.settings.url_form)
        self.scope.add_app(self.origin)
        if self.settings.private:
            self.gate = AccessGate(self.host_port)
        return self.host_port

    @property
    def url_suffix(self) -> str:
        """What follows the base path in the app's URL: the token of a private app."""
        return self.gate.url_suffix() if self.gate is not None else ""

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        if self.front is not None:
            held = self.front.held(self.front_id)
            log.debug("front.closed", port=self.host_port, relayed=held.relayed, handed=held.handed)
            self.front.remove(self.front_id)
            self.account.unserved()
            self.front = None
        if self._front_socket is not None:
            self._front_socket.close()
        if self._server is not None:
            self._server.close()
        if self._arrivals is not None:
            self._arrivals.close()  # the connections that have no task
        for connection in list(self.connections.values()):
            # Closed here: a task cancelled before its first step (spawned in this very
            # loop turn) never runs the ``finally`` that would close it.
            connection.close()
            connection.channel.abort()
        for tunnel in list(self._tunnels):
            tunnel.abort()
        await self.tasks.close()
        if self.pool is not None:
            self.pool.close()  # after the tasks: what they parked as they ended goes too
        if self._server is not None:
            await self._server.wait_closed()
        if self.origin is not None:
            self.scope.remove_app(self.origin)
        self.account.close()

    def _accept(self, channel: Channel) -> None:
        assert self._arrivals is not None
        self._arrivals.accept(channel)

    def park(self, upstream: UpstreamConnection) -> None:
        """An app connection a browser connection is done with: to the front door's pool
        (the host alone holds it, and it is idle), else to this one's, else closed."""
        pooled, size = len(self.pool or ()), self.settings.pool_size
        if self.front is not None and self.front.park_upstream(
            self.front_id, upstream, pooled, size
        ):
            return
        if self.pool is not None:
            self.pool.park(upstream)  # only if idle; closed otherwise
        else:
            upstream.channel.abort()

    def release(self, channel: Channel) -> None:
        """A browser connection is over (its :class:`Connection` closed): it no longer
        counts against the limits."""
        if self.connections.pop(channel, None) is not None:
            self.account.release()

    async def exchange(  # noqa: PLR0913  (an exchange, and the app connection it was sent on)
        self,
        browser: BrowserConnection,
        head: RequestHead,
        request: UpstreamRequest,
        upstream: UpstreamConnection | None,
        lane: KeepAliveLane,
        sent: UpstreamConnection | None = None,
    ) -> Outcome:
        """One request and its response; returns how the connections continue.
        ``sent``: the parked app connection the lane sent the request on already."""
        if upstream is not None and upstream.ready_for_exchange():
            # Kept from this browser connection's last exchange. A request that may go
            # twice goes once more on a new connection if the app closes this one
            # instead of answering (its keep-alive ended as the request came), as it
            # does on a parked one.
            result = await self._run_exchange(
                browser, head, request, upstream, lane, _may_go_twice(browser, head, request)
            )
            if result is not None:
                return result
            self._again(browser)
        elif upstream is not None:
            # Closed by the app meanwhile, bytes from it that answer nothing, or a head it
            # has not taken yet: a new exchange never starts on it. This is also what
            # bounds the heads the host holds for an app that does not read them: one.
            upstream.channel.abort()
        no_parked, browser.no_parked = browser.no_parked, False
        if sent is not None or (
            self.pool and not no_parked and _may_go_twice(browser, head, request)
        ):
            parked = sent if sent is not None or self.pool is None else self.pool.take()
            if parked is not None:
                result = await self._run_exchange(
                    browser, head, request, parked, lane, True, sent is not None
                )
                if result is not None:
                    return result
                # The app closed the parked connection instead of answering (its own
                # keep-alive timeout at that moment): the request goes out once more.
                self._again(browser, before_the_pool=False)
        try:
            opened = await self.connector.open(self.port)
        except UpstreamError as exc:
            return await self._bad_gateway(browser, head, request, str(exc)), None
        if opened is None:
            keep = await exchange_v1(
                browser,
                head,
                request,
                self.port,
                self.base_path,
                self.connector.socket_path,
                self.settings.response_timeout,
            )
            return Exchange(keep_browser=keep), None
        upstream = UpstreamConnection(*opened)
        result = await self._run_exchange(browser, head, request, upstream, lane)
        assert result is not None
        return result

    def _again(self, browser: BrowserConnection, *, before_the_pool: bool = True) -> None:
        """The app closed a reused connection (aborted since) instead of answering a
        bodiless request that may go twice: it goes once more, on a new connection (not a
        parked one, when the pool is asked after this: ``before_the_pool``)."""
        browser.events.appendleft(MESSAGE_END)
        browser.no_parked = before_the_pool
        log.debug("upstream.reused_closed", port=self.host_port, app_port=self.port)

    async def resume(
        self, browser: BrowserConnection, lane: KeepAliveLane, upstream: UpstreamConnection
    ) -> Outcome:
        """Carry on with an exchange the lane sent to the app."""
        head, request = lane.head, lane.request
        assert head is not None and request is not None
        if lane.end is LaneEnd.CONTINUE:
            # Nothing of a response yet: the app may have closed the reused connection
            # instead of answering (see :meth:`exchange`).
            repeatable = not lane.answering and not lane.events and may_retry(head, request)
            result = await self._run_exchange(
                browser, head, request, upstream, None, repeatable, resumed=lane.events
            )
            if result is not None:
                return result
            self._again(browser)
            return await self.exchange(browser, head, request, None, lane)
        upstream.channel.abort()
        timed_out = lane.end is LaneEnd.RESPONSE_TIMEOUT
        reason = no_response(self.settings.response_timeout) if timed_out else str(lane.error)
        return await self._bad_gateway(browser, head, request, reason, force_close=True), None

    async def _run_exchange(  # noqa: PLR0912, PLR0913  (one exchange's parts, as _relay_response takes them)
        self,
        browser: BrowserConnection,
        head: RequestHead,
        request: UpstreamRequest,
        upstream: UpstreamConnection,
        lane: KeepAliveLane | None,
        parked: bool = False,
        sent: bool = False,
        resumed: collections.deque[Event] | None = None,
    ) -> Outcome | None:
        """Send the request and relay the response; ``lane``: a bodiless request's
        response may be relayed from the read callback (:meth:`KeepAliveLane.relay_one`);
        ``resumed``: the lane sent the request (bodiless) and read these response
        events already. ``None``: the connection was a reused one (``parked``: from the
        pool, or kept from the browser connection's last exchange) and the app closed it
        before any of a response; nothing was sent to the browser (not even an interim
        response), and the request may go again. (A head the app began and cut counts as
        nothing: none of it reached the browser.)"""
        exchange = Exchange()
        try:
            if resumed is not None:
                await self._relay_response(
                    browser, head, request, upstream, exchange, None, resumed
                )
            elif sent or (
                request.framing is Framing.NONE
                and browser.events
                and browser.events[0] is MESSAGE_END
            ):
                # A request without a body (most are): nothing to pump, no task to run,
                # and no future standing in for one (a future and an await per request).
                if not sent:
                    browser.events.popleft()
                if lane is not None and (sent or not (head.upgrade or upstream.pending)):
                    # Its response's first read goes to the browser from the callback.
                    rest = await lane.relay_one(upstream, head, request, exchange, sent)
                    if rest is not None:  # the rest as the task reads it
                        await self._relay_response(
                            browser, head, request, upstream, exchange, None, rest
                        )
                else:
                    upstream.channel.write(request.head)
                    await self._relay_response(browser, head, request, upstream, exchange, None)
            else:
                upstream.channel.write(request.head)
                await self._exchange_with_body(browser, head, request, upstream, exchange)
        except (UpstreamError, HttpError, OSError) as exc:
            closed_by_app = upstream.channel.at_end()
            upstream.channel.abort()
            if exchange.response_started:
                raise OSError("upstream failed mid-response") from exc
            if parked and closed_by_app and not exchange.interim_sent:
                return None
            return await self._bad_gateway(browser, head, request, str(exc), force_close=True), None
        except BaseException:  # cancelled (the listener closes): the upstream goes too
            upstream.channel.abort()
            raise
        if exchange.tunnelled:
            return exchange, None
        if not exchange.reuse_upstream:
            upstream.channel.abort()
            return exchange, None
        return exchange, upstream

    async def _exchange_with_body(
        self,
        browser: BrowserConnection,
        head: RequestHead,
        request: UpstreamRequest,
        upstream: UpstreamConnection,
        exchange: Exchange,
    ) -> None:
        """Relay the response while a task passes the request body on."""
        pump = asyncio.create_task(pump_request_body(browser, upstream, request, exchange))
        try:
            await self._relay_response(browser, head, request, upstream, exchange, pump)
            if not pump.done() and not request.upgrade:
                # The app answered before reading the whole body (nginx's `return`
                # does): keep passing the body on while the app keeps taking it, so
                # the browser can finish sending and the connection stays usable.
                await finish_body(pump, exchange, self.settings.header_timeout)
            if not pump.done() or pump.exception() is not None:
                exchange.keep_browser = exchange.reuse_upstream = False
        finally:
            if not pump.done():
                pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError, HttpError):
                await pump

    async def _bad_gateway(
        self,
        browser: BrowserConnection,
        head: RequestHead,
        request: UpstreamRequest,
        reason: str,
        force_close: bool = False,
    ) -> Exchange:
        log.debug("upstream.failed", port=self.host_port, app_port=self.port, reason=reason)
        return await bad_gateway(browser, head, request, reason, force_close)

    async def _relay_response(  # noqa: PLR0912, PLR0913, PLR0915  (the response loop of the data path; split, it costs a frame per event)
        self,
        browser: BrowserConnection,
        head: RequestHead,
        request: UpstreamRequest,
        upstream: UpstreamConnection,
        exchange: Exchange,
        pump: asyncio.Future[None] | None,  # None: the request has no body
        resumed: collections.deque[Event] | None = None,  # read by the lane already
    ) -> None:
        events: collections.deque[Event] = collections.deque()
        if resumed is not None:
            reader = upstream.reader
            assert reader is not None
            events = resumed
        else:
            reader = upstream.expect_response(head.method)
        if upstream.pending:
            events.extend(reader.feed(upstream.pending))
            upstream.pending = b""
        decision: ResponseDecision | None = None  # once the final response head is read
        # What is ready for the browser is written in one call once the events already
        # read are used up: a small response (head, body, end) costs one send, not three.
        out: list[bytes] = []
        channel = browser.channel  # sent to directly: one coroutine less per send
        while True:
            if not events:
                if out:
                    await channel.send(b"".join(out))
                    out.clear()
                if (
                    decision is not None
                    and (pump is None or pump.done())
                    and lane_ready(browser, upstream.channel)
                ):
                    # The body goes on from the app's read callback (body_lane.py).
                    events.extend(
                        await relay_body(
                            reader,
                            decision,
                            browser,
                            upstream.channel,
                            self.settings.response_timeout,
                        )
                    )
                    if not events:
                        # The lane stopped at a full write buffer (drain waits), a lost
                        # browser (drain raises) or the app's end (the read below meets it).
                        await channel.drain()
                        continue
                while not events:
                    if decision is None:
                        data = await read_awaiting_response(
                            browser, upstream, exchange, self.settings.response_timeout
                        )
                    else:
                        data = await read_response_body(
                            browser, upstream, self.settings.response_timeout
                        )
                    events.extend(reader.feed(data) if data else reader.feed_eof())
            event = events.popleft()
            if isinstance(event, BodyChunk) and decision is not None:
                out.append(decision.body(event.data))
            elif isinstance(event, ResponseHead):
                if event.status == 101:
                    if not request.upgrade:
                        raise UpstreamError("app answered 101 to a request that did not upgrade")
                    response = build_browser_response(
                        event,
                        request=head,
                        close_delimited=False,
                        keep_alive=False,
                        private=browser.heads.private,
                    )
                    exchange.response_started = True
                    await browser.send(response.head)
                    if pump is not None:
                        await pump
                    exchange.tunnelled = self._tunnel(browser, upstream, events)
                    return
                if event.status < 200:
                    if head.version == "1.1":
                        response = build_browser_response(
                            event,
                            request=head,
                            close_delimited=False,
                            keep_alive=True,
                            private=browser.heads.private,
                        )
                        await browser.send(response.head)  # interim: the client waits for it
                        exchange.interim_sent = True
                    continue
                decision = decide_response(
                    event, head, browser.heads, close_delimited=reader.close_delimited
                )
                exchange.keep_browser = decision.keep_browser
                exchange.response_started = True
                out.append(decision.head)
            elif event is MESSAGE_END and decision is not None:
                if decision.end:
                    out.append(decision.end)
                if out:
                    await channel.send(out[0] if len(out) == 1 else b"".join(out))
                exchange.reuse_upstream = decision.reuse_upstream(reader.extra_data)
                upstream.answered(exchange.reuse_upstream)
                return
            else:
                raise UpstreamError(f"unexpected event from app: {event!r}")

    def _tunnel(
        self,
        browser: BrowserConnection,
        upstream: UpstreamConnection,
        upstream_events: collections.deque[Event],
    ) -> bool:
        """Hand both sockets to a :class:`Tunnel` after a 101 (:func:`open_tunnel`),
        owned by this listener until both are closed; ``False`` if a side is gone (or
        the connection closed: the listener closes)."""
        connection = self.connections.get(browser.channel)
        if connection is None:
            return False

        def closed() -> None:
            self._tunnels.discard(tunnel)
            connection.close()

        tunnel = open_tunnel(
            browser, upstream, upstream_events, closed, use_native=self.settings.front_door
        )
        if tunnel is None:
            return False
        self._tunnels.add(tunnel)
        connection.move(StageEvent.UPGRADE)
        return True
