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
the connection's task (:class:`_KeepAliveLane`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
from collections.abc import Callable
from dataclasses import dataclass

from sandbridge import log
from sandbridge.aio.unix_sockets import Pump
from sandbridge.aio.watchdog import Watchdog
from sandbridge.exceptions import HttpError, UpstreamError
from sandbridge.protocol.http.forwarding import (
    LAST_CHUNK,
    ConnectionHeads,
    Framing,
    UpstreamRequest,
    build_browser_response,
    encode_chunk,
    error_response,
)
from sandbridge.protocol.http.origin_policy import AppOrigin
from sandbridge.protocol.http.parser import (
    MESSAGE_END,
    BodyChunk,
    Event,
    RequestHead,
    RequestReader,
    ResponseHead,
    ResponseReader,
    Upgraded,
)
from sandbridge.protocol.http.private_access import TOKEN_PARAM, AccessGate, redirect_response
from sandbridge.relay import local_peer
from sandbridge.relay.channel import Channel
from sandbridge.relay.settings import SessionScope
from sandbridge.relay.upstream import UpstreamConnector
from sandbridge.relay.v1_exchange import exchange_v1

# One read from either socket. 256 KiB keeps syscalls per byte low on bulk transfers
# while bounding what one connection can hold per direction.
READ_BYTES = 256 * 1024
# After one side of a tunnel (WebSocket) ends, the other gets this long to finish.
TUNNEL_CLOSE_GRACE = 2.0


@dataclass(frozen=True, slots=True)
class App:
    """One registration: host port ``host_port`` forwards to sandbox ``port``."""

    port: int
    base_path: str
    host_port: int
    url: str
    host_name: str = "127.0.0.1"  # what clients must send as Host (with the port)


class BrowserConnection:
    """The browser side of one connection: a socket, its request reader and the
    translation of its heads."""

    def __init__(self, channel: Channel, heads: ConnectionHeads) -> None:
        self.channel = channel
        self.parser = RequestReader()
        self.events: collections.deque[Event] = collections.deque()
        self.heads = heads
        # Every timeout of this connection's task (keep-alive, header, response).
        self.watchdog = Watchdog()

    async def next_event(self) -> Event | None:
        """The next request event, reading as needed; ``None`` at end of stream."""
        while not self.events:
            data = await self.channel.read()
            if not data:
                return None
            self.events.extend(self.parser.feed(data))
        return self.events.popleft()

    async def send(self, data: bytes) -> None:
        await self.channel.send(data)


@dataclass
class _Upstream:
    channel: Channel
    pending: bytes = b""
    reader: ResponseReader | None = None  # kept from one response to the next
    reusable: bool = True

    def expect_response(self, request_method: bytes) -> ResponseReader:
        """The reader, ready for the response to a request just sent."""
        if self.reader is None:
            self.reader = ResponseReader(request_method)
        else:
            self.reader.next_response(request_method)
        return self.reader


@dataclass
class _Exchange:
    """What one request/response exchange ended with."""

    keep_browser: bool = False
    reuse_upstream: bool = False
    response_started: bool = False
    body_sent: int = 0
    tunnelled: bool = False  # after a 101: both sockets now belong to a _Tunnel


class _Tunnel:
    """An upgraded connection (a WebSocket) after its 101: two linked pumps, no task.

    A WebSocket mostly sits idle; with no task, no coroutine frames and no request
    state kept alive, what an open one costs is its two sockets and two small
    protocol objects (the host's memory per idle WebSocket went from ~19 KiB to
    ~8 KiB with 2,000 open). After one side ends, the other gets ``grace`` seconds to
    finish; then both are dropped. ``on_closed`` runs once both sockets are closed.
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


class _LaneEnd(enum.Enum):
    """Why a :class:`_KeepAliveLane` gave the connection back to its task."""

    IDLE_TIMEOUT = "no request within the keep-alive timeout"
    FALLBACK = "the task reads on: browser.events holds what was read, if anything"
    DONE = "an exchange is complete; keep_browser and reuse_upstream say how to go on"
    CONTINUE = "the request is sent; the task relays the rest of the response"
    RESPONSE_TIMEOUT = "the request is sent and the app did not answer in time"
    UPSTREAM_FAILED = "the request is sent and the app's answer is malformed"
    ERROR = "the browser's bytes are refused: the task raises error"


_TOKEN = TOKEN_PARAM.encode()


class _KeepAliveLane:
    """Small keep-alive exchanges relayed from the event loop's read callbacks.

    Why: a small request through the task cost two task wake-ups, two futures and a
    handful of coroutine frames on top of the parsing and the checks; with them the
    host spent ~36 us of CPU per 1 KiB GET where a bare callback relay with the same
    parser spends ~13 us (py-spy and ``/proc`` CPU per request at 64 keep-alive
    clients, docs/benchmarks.md, round 5), and each wake-up also added latency.

    How: while a connection's task waits for its next request and holds a reusable
    upstream, both channels are attached to this lane (:attr:`Channel.lane`). A read
    that completes a bodiless request (head and end together: the usual GET) is
    checked and sent to the app right in the callback; a read from the app that
    completes a final response is checked and sent to the browser right there, and
    the lane waits for the next request. The task sleeps through all of it.

    Anything else ends the lane and the task carries on from exactly that point with
    the same code as always: a partial head (header timeout), a body, an upgrade, a
    private app's token exchange, a refusal, a response over several reads, an interim
    response, a full write buffer, an end of stream. The lane has no rules of its own:
    same parser, same translation of heads (:class:`ConnectionHeads`), same
    timeouts (it moves the task's watchdog), so what the browser and the app see is
    byte for byte what the task would send.
    """

    def __init__(self, listener: AppListener, browser: BrowserConnection) -> None:
        self._listener = listener
        self._browser = browser
        self._waiter: asyncio.Future[None] | None = None
        self._upstream: _Upstream | None = None
        self.end: _LaneEnd | None = None
        self.in_flight = False
        # the exchange in flight, and what it ended with
        self.head: RequestHead | None = None
        self.request: UpstreamRequest | None = None
        self.events: collections.deque[Event] = collections.deque()
        self.keep_browser = False
        self.reuse_upstream = False
        self.error: Exception | None = None

    async def run(self, upstream: _Upstream) -> _LaneEnd:
        """Relay exchanges until one needs the task; say why."""
        browser = self._browser
        settings = self._listener.settings
        self._upstream = upstream
        self.end, self.in_flight, self.error = None, False, None
        self.events = collections.deque()
        self._waiter = asyncio.get_running_loop().create_future()
        browser.channel.lane = self
        upstream.channel.lane = self
        try:
            with browser.watchdog.limit(settings.keepalive_timeout):
                await self._waiter
        except TimeoutError:
            if self.end is None:
                self.end = _LaneEnd.RESPONSE_TIMEOUT if self.in_flight else _LaneEnd.IDLE_TIMEOUT
        finally:
            browser.channel.lane = None
            upstream.channel.lane = None
            self._waiter = None
        assert self.end is not None
        return self.end

    def _finish(self, end: _LaneEnd) -> None:
        if self.end is not None:
            return
        self.end = end
        self._browser.channel.lane = None
        if self._upstream is not None:
            self._upstream.channel.lane = None
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # Channel's Lane protocol ------------------------------------------------------------

    def received(self, channel: Channel, data: bytes) -> None:
        if self._browser.watchdog.expired:
            # The timeout fired in this loop turn and the task is being woken for it:
            # these bytes come too late. (A request read now would reach the app and
            # then be answered as if the app had timed out.)
            self._finish(_LaneEnd.RESPONSE_TIMEOUT if self.in_flight else _LaneEnd.IDLE_TIMEOUT)
            return
        try:
            if channel is self._browser.channel:
                self._request_data(data)
            else:
                self._response_data(data)
        except Exception as exc:  # nothing may escape into the event loop
            self.error = exc
            self._finish(_LaneEnd.ERROR)

    def interrupted(self, channel: Channel) -> None:
        upstream = self._upstream
        if channel is self._browser.channel:
            self._finish(_LaneEnd.FALLBACK)  # the task reads the end of stream itself
        elif self.in_flight:
            self._finish(_LaneEnd.CONTINUE)  # the task reads it: 502, or a close-delimited end
        elif upstream is not None:
            # The app closed an idle connection: the next request opens a new one.
            upstream.reusable = False
            upstream.channel.lane = None

    # the two directions -----------------------------------------------------------------

    def _request_data(self, data: bytes) -> None:
        browser = self._browser
        events = browser.parser.feed(data)
        upstream = self._upstream
        head = events[0] if len(events) == 2 and events[1] is MESSAGE_END else None
        request = None
        if (
            isinstance(head, RequestHead)
            and not head.upgrade
            and upstream is not None
            and upstream.reusable
            # an app that does not read its requests, or a reset in this same loop turn
            and upstream.channel.ready_for_exchange()
            and self._admitted(head)
        ):
            try:
                request = browser.heads.request(head, self._listener.scope.origins)
            except HttpError:
                request = None  # the task refuses it, as it refuses any request
        if request is None or request.framing is not Framing.NONE:
            browser.events.extend(events)
            self._finish(_LaneEnd.FALLBACK)
            return
        assert upstream is not None and isinstance(head, RequestHead)
        upstream.expect_response(head.method)
        upstream.channel.write(request.head)
        self.head, self.request, self.in_flight = head, request, True
        # A pipelined request waits in the channel until this exchange is over.
        browser.channel.lane = None
        browser.watchdog.limit(self._listener.settings.response_timeout)

    def _admitted(self, head: RequestHead) -> bool:
        """A private app's request passes here only with the app's cookie and no token."""
        gate = self._listener.gate
        if gate is None:
            return True
        if _TOKEN in head.target:
            return False  # the token exchange is the task's
        try:
            return gate.check(head.target, head.headers) is None
        except HttpError:
            return False  # the task refuses it

    def _response_data(self, data: bytes) -> None:
        upstream = self._upstream
        assert upstream is not None
        if not self.in_flight:
            # The app sent bytes with no request in flight: they answer nothing, and
            # must never be taken for the next request's response. The connection is
            # dropped; the next request opens a new one.
            upstream.reusable = False
            upstream.channel.lane = None
            upstream.channel.abort()
            return
        reader = upstream.reader
        assert reader is not None and self.head is not None
        try:
            events = reader.feed(data)
        except HttpError as exc:
            self.error = exc
            self._finish(_LaneEnd.UPSTREAM_FAILED)
            return
        final = events[0] if events and events[-1] is MESSAGE_END else None
        body: list[bytes] = []
        if isinstance(final, ResponseHead) and final.status >= 200 and final.status != 101:
            for event in events[1:-1]:
                if not isinstance(event, BodyChunk):
                    final = None
                    break
                body.append(event.data)
        else:
            final = None
        if final is None:
            self.events.extend(events)
            self._finish(_LaneEnd.CONTINUE)
            return
        response = self._browser.heads.response(
            final, self.head, close_delimited=reader.close_delimited
        )
        if response.framing is Framing.CHUNKED:
            body = [*map(encode_chunk, body), LAST_CHUNK]
        browser = self._browser.channel
        browser.write(response.head + b"".join(body) if body else response.head)
        self.in_flight = False
        self.keep_browser = response.keep_alive
        self.reuse_upstream = (
            final.keep_alive and not reader.close_delimited and not reader.extra_data
        )
        if (
            self.keep_browser
            and self.reuse_upstream
            and browser.ready_for_exchange()
            and not self._browser.parser.in_head  # (a pipelined head began: its timeout)
        ):
            browser.lane = self
            self._browser.watchdog.limit(self._listener.settings.keepalive_timeout)
        else:
            self._finish(_LaneEnd.DONE)


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
        self.gate: AccessGate | None = None
        self.host_port = 0
        self.origin: AppOrigin | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[Channel] = set()
        self._tunnels: set[_Tunnel] = set()
        # One task per browser connection, owned here: close() ends them.
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def app(self) -> App:
        assert self.origin is not None, "start() names the app"
        url = self.origin.url(self.base_path) + self.url_suffix
        return App(self.port, self.base_path, self.host_port, url, self.origin.hostname)

    async def start(self) -> int:
        """Bind a new random loopback port; return it."""
        loop = asyncio.get_running_loop()
        local_peer.shared_owners()
        self._server = await loop.create_server(
            lambda: Channel(READ_BYTES, on_made=self._accept),
            host="127.0.0.1",
            port=0,
            backlog=512,
        )
        self.host_port = self._server.sockets[0].getsockname()[1]
        self.origin = AppOrigin.new(self.host_port, self.settings.url_form)
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
        if self._server is not None:
            self._server.close()
        for channel in list(self._connections):
            channel.abort()
        for tunnel in list(self._tunnels):
            tunnel.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _accept(self, channel: Channel) -> None:
        assert channel.transport is not None
        if not local_peer.is_owners_connection(channel.transport, self.host_port):
            channel.transport.abort()  # another user's: dropped before it counts anywhere
            return
        task = asyncio.get_running_loop().create_task(self._serve(channel))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, channel: Channel) -> None:
        scope = self.scope
        if (
            len(self._connections) >= self.settings.max_connections_per_app
            or scope.connections >= self.settings.max_connections
        ):
            log.debug("connection.refused", port=self.host_port, reason="connection limit")
            with contextlib.suppress(OSError):
                channel.write(error_response(503, "too many open connections to this relay"))
                await channel.linger_close()
            channel.abort()
            return
        self._connections.add(channel)
        scope.connections += 1
        assert channel.transport is not None
        peer = channel.transport.get_extra_info("peername")
        client_host = peer[0] if isinstance(peer, tuple) else "127.0.0.1"
        assert self.origin is not None
        heads = ConnectionHeads(
            base_path=self.base_path,
            origin=self.origin,
            client_host=client_host,
            sandbox_port=self.port,
            private=self.gate is not None,
        )
        browser = BrowserConnection(channel, heads)
        upstream: _Upstream | None = None
        tunnelled = False
        lane = _KeepAliveLane(self, browser)
        try:
            while True:
                if (
                    upstream is not None
                    and upstream.reusable
                    and not upstream.pending
                    and not browser.events
                    and not browser.parser.in_head
                    and channel.ready_for_exchange()
                    and upstream.channel.ready_for_exchange()
                ):
                    end = await lane.run(upstream)
                    if end is _LaneEnd.IDLE_TIMEOUT:
                        break
                    if end is _LaneEnd.ERROR:
                        assert lane.error is not None
                        raise lane.error
                    if end is _LaneEnd.DONE:
                        if not lane.reuse_upstream:
                            upstream.channel.abort()
                            upstream = None
                        if not lane.keep_browser:
                            break
                        await channel.drain()
                        continue
                    if end in (
                        _LaneEnd.CONTINUE,
                        _LaneEnd.RESPONSE_TIMEOUT,
                        _LaneEnd.UPSTREAM_FAILED,
                    ):
                        exchange, upstream = await self._resume(browser, lane, upstream)
                        if not exchange.keep_browser:
                            break
                        continue
                event = await self._next_head(browser)
                if event is None:
                    break
                if not isinstance(event, RequestHead):
                    raise HttpError(400, "request body without a request")
                if self.gate is not None and not await self._admit(browser, event):
                    continue
                request = heads.request(event, scope.origins)
                exchange, upstream = await self._exchange(browser, event, request, upstream)
                if exchange.tunnelled:
                    tunnelled = True  # the connection lives on in a _Tunnel
                    break
                if not exchange.keep_browser:
                    break
        except HttpError as exc:
            log.debug("request.refused", port=self.host_port, status=exc.status, reason=str(exc))
            with contextlib.suppress(OSError):
                await browser.send(error_response(exc.status, str(exc)))
                await channel.linger_close()
        except OSError:
            pass
        finally:
            browser.watchdog.close()
            if upstream is not None:
                upstream.channel.abort()
            if not tunnelled:
                self._release(channel)
                channel.abort() if channel.transport.is_closing() else channel.close()
                await channel.closed

    def _release(self, channel: Channel) -> None:
        """A browser connection is over: it no longer counts against the limits."""
        self.scope.connections -= 1
        self._connections.discard(channel)

    async def _next_head(self, browser: BrowserConnection) -> Event | None:
        """Wait for the next request: idle up to the keep-alive timeout, then the head
        must be complete within the header timeout (a 408 otherwise); a head begun
        already (read with the previous request, or by the lane) gets only the latter."""
        if browser.events:
            return browser.events.popleft()
        if not browser.parser.in_head:
            try:
                with browser.watchdog.limit(self.settings.keepalive_timeout):
                    data = await browser.channel.read()
            except TimeoutError:
                return None
            if not data:
                return None
            browser.events.extend(browser.parser.feed(data))
            if browser.events:  # the usual case: the whole head came in one read
                return browser.events.popleft()
        try:
            with browser.watchdog.limit(self.settings.header_timeout):
                return await browser.next_event()
        except TimeoutError:
            raise HttpError(
                408, f"request head not complete within {self.settings.header_timeout:g} s"
            ) from None

    async def _admit(self, browser: BrowserConnection, head: RequestHead) -> bool:
        """Private apps: exchange the one-time token for the cookie, or refuse (403)."""
        assert self.gate is not None
        redirect = self.gate.check(head.target, head.headers)
        if redirect is None:
            return True
        try:
            with browser.watchdog.limit(self.settings.header_timeout):
                event = await browser.next_event()
        except TimeoutError:
            raise HttpError(
                408, f"request not complete within {self.settings.header_timeout:g} s"
            ) from None
        if event is not MESSAGE_END:
            raise HttpError(400, "the token exchange takes no request body")
        await browser.send(redirect_response(redirect))
        return False

    async def _exchange(
        self,
        browser: BrowserConnection,
        head: RequestHead,
        request: UpstreamRequest,
        upstream: _Upstream | None,
    ) -> tuple[_Exchange, _Upstream | None]:
        """One request and its response; returns how the connections continue."""
        if (
            upstream is None
            or not upstream.reusable
            # Closed by the app meanwhile, bytes from it that answer nothing, or a head
            # it has not taken yet: a new exchange never starts on it. This is also what
            # bounds the heads the host holds for an app that does not read them: one.
            or not upstream.channel.ready_for_exchange()
        ):
            if upstream is not None:
                upstream.channel.abort()
                upstream = None
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
                return _Exchange(keep_browser=keep), None
            upstream = _Upstream(*opened)
        return await self._run_exchange(browser, head, request, upstream, None)

    async def _resume(
        self, browser: BrowserConnection, lane: _KeepAliveLane, upstream: _Upstream
    ) -> tuple[_Exchange, _Upstream | None]:
        """Carry on with an exchange the lane sent to the app."""
        head, request = lane.head, lane.request
        assert head is not None and request is not None
        if lane.end is _LaneEnd.CONTINUE:
            return await self._run_exchange(browser, head, request, upstream, lane.events)
        upstream.channel.abort()
        timed_out = lane.end is _LaneEnd.RESPONSE_TIMEOUT
        reason = self._no_response() if timed_out else str(lane.error)
        return await self._bad_gateway(browser, head, request, reason, force_close=True), None

    async def _run_exchange(
        self,
        browser: BrowserConnection,
        head: RequestHead,
        request: UpstreamRequest,
        upstream: _Upstream,
        resumed: collections.deque[Event] | None,
    ) -> tuple[_Exchange, _Upstream | None]:
        """Send the request and relay the response; ``resumed``: the lane sent the
        request (bodiless) and read these response events already."""
        exchange = _Exchange()
        try:
            if resumed is not None:
                await self._relay_response(
                    browser, head, request, upstream, exchange, None, resumed
                )
            elif (
                request.framing is Framing.NONE
                and browser.events
                and browser.events[0] is MESSAGE_END
            ):
                # A request without a body (most are): nothing to pump, no task to run,
                # and no future standing in for one (a future and an await per request).
                upstream.channel.write(request.head)
                browser.events.popleft()
                await self._relay_response(browser, head, request, upstream, exchange, None)
            else:
                upstream.channel.write(request.head)
                await self._exchange_with_body(browser, head, request, upstream, exchange)
        except (UpstreamError, HttpError, OSError) as exc:
            upstream.channel.abort()
            if exchange.response_started:
                raise OSError("upstream failed mid-response") from exc
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
        upstream: _Upstream,
        exchange: _Exchange,
    ) -> None:
        """Relay the response while a task passes the request body on."""
        pump = asyncio.create_task(self._pump_request_body(browser, upstream, request, exchange))
        try:
            await self._relay_response(browser, head, request, upstream, exchange, pump)
            if not pump.done() and not request.upgrade:
                # The app answered before reading the whole body (nginx's `return`
                # does): keep passing the body on while the app keeps taking it, so
                # the browser can finish sending and the connection stays usable.
                await self._finish_body(pump, exchange)
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
    ) -> _Exchange:
        log.debug("upstream.failed", port=self.host_port, app_port=self.port, reason=reason)
        keep = (
            not force_close
            and request.framing is Framing.NONE
            and not request.upgrade
            and head.keep_alive
            and head.version == "1.1"
        )
        if keep:
            event = await browser.next_event()  # the MESSAGE_END of a bodiless request
            keep = event is MESSAGE_END
        await browser.send(error_response(502, reason, keep_alive=keep))
        return _Exchange(keep_browser=keep)

    async def _read_awaiting_response(
        self, browser: BrowserConnection, upstream: _Upstream, exchange: _Exchange
    ) -> bytes:
        """Read from the app before its final response head: an app that neither answers
        nor takes request body for the response timeout has stalled (502)."""
        while True:
            progress = exchange.body_sent
            try:
                with browser.watchdog.limit(self.settings.response_timeout):
                    # Cancelling Channel.read loses no data: it stays buffered.
                    return await upstream.channel.read()
            except TimeoutError:
                if exchange.body_sent == progress:
                    raise UpstreamError(self._no_response()) from None

    def _no_response(self) -> str:
        """Why an exchange failed whose app sent nothing within the response timeout."""
        return f"app sent no response within {self.settings.response_timeout:g} s"

    async def _finish_body(self, pump: asyncio.Future[None], exchange: _Exchange) -> None:
        """Wait for the request body to finish while it makes progress."""
        while not pump.done():
            progress = exchange.body_sent
            await asyncio.wait({pump}, timeout=self.settings.header_timeout)
            if exchange.body_sent == progress:
                return

    async def _read_response_body(self, browser: BrowserConnection, upstream: _Upstream) -> bytes:
        """Read more of a response; silence for the response timeout ends the stream."""
        try:
            with browser.watchdog.limit(self.settings.response_timeout):
                return await upstream.channel.read()
        except TimeoutError:
            raise UpstreamError(
                f"app sent nothing for {self.settings.response_timeout:g} s mid-response"
            ) from None

    async def _pump_request_body(
        self,
        browser: BrowserConnection,
        upstream: _Upstream,
        request: UpstreamRequest,
        exchange: _Exchange,
    ) -> None:
        chunked = request.framing is Framing.CHUNKED
        while True:
            event = await browser.next_event()
            if event is None:
                # The request can never be completed: drop the app's connection now, or
                # the app waits for the rest of the body (and the relay for its answer)
                # until the response timeout, holding both connections.
                upstream.channel.abort()
                raise OSError("browser closed the connection mid-request")
            if event is MESSAGE_END:
                if chunked:
                    await upstream.channel.send(LAST_CHUNK)
                return
            if isinstance(event, BodyChunk):
                await upstream.channel.send(encode_chunk(event.data) if chunked else event.data)
                exchange.body_sent += len(event.data)
            else:
                raise HttpError(400, "unexpected event in request body")

    async def _relay_response(
        self,
        browser: BrowserConnection,
        head: RequestHead,
        request: UpstreamRequest,
        upstream: _Upstream,
        exchange: _Exchange,
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
        framing = Framing.NONE
        final: ResponseHead | None = None
        # What is ready for the browser is written in one call once the events already
        # read are used up: a small response (head, body, end) costs one send, not three.
        out: list[bytes] = []
        channel = browser.channel  # sent to directly: one coroutine less per send
        while True:
            if not events:
                if out:
                    await channel.send(b"".join(out))
                    out.clear()
                while not events:
                    if final is None:
                        data = await self._read_awaiting_response(browser, upstream, exchange)
                    else:
                        data = await self._read_response_body(browser, upstream)
                    events.extend(reader.feed(data) if data else reader.feed_eof())
            event = events.popleft()
            if isinstance(event, BodyChunk):
                out.append(encode_chunk(event.data) if framing is Framing.CHUNKED else event.data)
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
                    continue
                final = event
                response = browser.heads.response(
                    event, head, close_delimited=reader.close_delimited
                )
                framing = response.framing
                exchange.keep_browser = response.keep_alive and not request.upgrade
                exchange.response_started = True
                out.append(response.head)
            elif event is MESSAGE_END:
                if framing is Framing.CHUNKED:
                    out.append(LAST_CHUNK)
                await channel.send(out[0] if len(out) == 1 else b"".join(out))
                assert final is not None
                exchange.reuse_upstream = (
                    final.keep_alive
                    and not reader.close_delimited
                    and not reader.extra_data
                    and not request.upgrade
                )
                return
            else:
                raise UpstreamError(f"unexpected event from app: {event!r}")

    def _tunnel(
        self,
        browser: BrowserConnection,
        upstream: _Upstream,
        upstream_events: collections.deque[Event],
    ) -> bool:
        """Copy bytes both ways after a 101, untouched, until either side ends.

        Both sockets move from their channels to a pair of :class:`Pump` protocols that
        forward from the event loop's read callbacks (one ``write`` per message, no
        task per direction), owned by a :class:`_Tunnel` from then on. ``False`` if a
        side is already gone (nothing to tunnel).
        """
        channel = browser.channel
        if channel.closed.done() or upstream.channel.closed.done():
            return False
        leftover = b""
        while browser.events:
            event = browser.events.popleft()
            if isinstance(event, Upgraded):
                leftover += event.trailing
        if leftover:
            upstream.channel.write(leftover)
        for event in upstream_events:
            if isinstance(event, Upgraded) and event.trailing:
                browser.channel.write(event.trailing)

        browser_side, app_side = Pump(), Pump()
        browser_side.link(app_side)
        channel.hand_over(browser_side)
        upstream.channel.hand_over(app_side)

        def closed() -> None:
            self._tunnels.discard(tunnel)
            self._release(channel)

        tunnel = _Tunnel(browser_side, app_side, TUNNEL_CLOSE_GRACE, closed)
        self._tunnels.add(tunnel)
        channel.catch_up(browser_side)
        upstream.channel.catch_up(app_side)
        return True
