"""Small keep-alive exchanges relayed from the event loop's read callbacks:
:class:`KeepAliveLane`.

Why: a small request through the connection's task costs two task wake-ups, two
futures and a handful of coroutine frames on top of the parsing and the checks, which
was most of the host's CPU per small request and added latency (docs/architecture.md,
"Why these parts exist").

How: while a connection's task waits for its next request and holds a reusable
upstream, both channels are attached to the lane (:attr:`Channel.lane`). A read that
completes a bodiless request (head and end together: the usual GET) is checked and
sent to the app right in the callback; a read from the app that completes a final
response is checked and sent to the browser right there, and the lane waits for the
next request. The task sleeps through all of it.

Anything else ends the lane and the task carries on from exactly that point with the
same code as always: a partial head (header timeout), a body, an upgrade, a private
app's token exchange, a refusal, a response over several reads, an interim response, a
full write buffer, an end of stream. The lane has no rules of its own: same parser,
same translation of heads (:class:`ConnectionHeads`), same response decision
(:func:`~sandbridge.protocol.http.exchange.decide_response`), same timeouts (it moves
the task's watchdog), so what the browser and the app see is byte for byte what the
task would send.
"""

from __future__ import annotations

import asyncio
import collections
import enum
from collections.abc import Callable

from sandbridge.exceptions import HttpError, UpstreamError
from sandbridge.protocol.http.exchange import decide_response
from sandbridge.protocol.http.forwarding import Framing, UpstreamRequest
from sandbridge.protocol.http.parser import (
    MESSAGE_END,
    BodyChunk,
    Event,
    RequestHead,
    ResponseHead,
)
from sandbridge.protocol.http.private_access import TOKEN_PARAM, AccessGate
from sandbridge.relay.host.channel import Channel
from sandbridge.relay.host.settings import SessionScope
from sandbridge.relay.host.upstream import UpstreamConnection
from sandbridge.relay.listener.app_pool import AppConnectionPool, may_retry
from sandbridge.relay.listener.browser import BrowserConnection
from sandbridge.relay.listener.exchange_io import Exchange, no_response


class LaneEnd(enum.Enum):
    """Why a :class:`KeepAliveLane` gave the connection back to its task."""

    IDLE_TIMEOUT = "no request within the keep-alive timeout"
    FALLBACK = "the task reads on: browser.events holds what was read, if anything"
    DONE = "an exchange is complete; keep_browser and reuse_upstream say how to go on"
    CONTINUE = "the request is sent; the task relays the rest of the response"
    RESPONSE_TIMEOUT = "the request is sent and the app did not answer in time"
    UPSTREAM_FAILED = "the request is sent and the app's answer is malformed"
    ERROR = "the browser's bytes are refused: the task raises error"


_TOKEN = TOKEN_PARAM.encode()


def send_first(
    browser: BrowserConnection, pool: AppConnectionPool, origins: frozenset[bytes]
) -> tuple[UpstreamConnection, RequestHead, UpstreamRequest] | None:
    """A new connection's first bytes, read in the callback that received them: a whole
    bodiless request that may take a parked app connection (the pool's rule,
    :func:`may_retry`) is written to one now, before the connection's task (or even its
    lane) exists; returns that app connection and the exchange, for
    :meth:`KeepAliveLane.sent` (before the event loop runs anything else).

    Anything else is left for the task, which goes on as if it had read the bytes
    itself: the events in ``browser.events``, a refusal in ``browser.failed``. (A
    private app's requests are the task's: its gate is checked there.)"""
    try:
        events = browser.parser.feed(browser.channel.take())
    except HttpError as exc:
        browser.failed = exc
        return None
    browser.events.extend(events)
    head = events[0] if len(events) == 2 and events[1] is MESSAGE_END else None
    if not isinstance(head, RequestHead) or head.upgrade:
        return None
    try:
        request = browser.heads.request(head, origins)
    except HttpError:
        return None  # the task translates it again, and refuses it
    upstream = pool.take() if may_retry(head, request) else None
    if upstream is None:
        return None  # the task opens one (or takes one, for a request it may repeat)
    try:
        upstream.channel.write(request.head)
    except OSError:
        upstream.channel.abort()
        return None  # (the app closed it just now) the task opens one
    browser.events.clear()
    return upstream, head, request


def lane_can_start(browser: BrowserConnection, upstream: UpstreamConnection) -> bool:
    """Whether the lane may take a connection: between two requests on the browser's
    side, with an app connection that a next request may use and that holds nothing of
    a response yet."""
    return upstream.ready_for_exchange() and not upstream.pending and browser.between_requests()


class KeepAliveLane:
    """Relays the exchanges of one browser connection that fit in one read each way,
    between the requests its task serves (see the module's docstring)."""

    def __init__(
        self, browser: BrowserConnection, scope: SessionScope, gate: AccessGate | None
    ) -> None:
        self._browser = browser
        self._scope = scope
        self._settings = scope.settings
        self._gate = gate
        self._waiter: asyncio.Future[None] | None = None
        self._upstream: UpstreamConnection | None = None
        self.end: LaneEnd | None = None
        self.in_flight = False
        # the exchange in flight, and what it ended with
        self.head: RequestHead | None = None
        self.request: UpstreamRequest | None = None
        self.events: collections.deque[Event] = collections.deque()
        self.keep_browser = False
        self.reuse_upstream = False
        self.error: Exception | None = None
        self.answering = False  # the response's first bytes went to the browser
        self._one = False  # relay_one: end after this exchange's response
        # Starts the connection's task when the lane ends: set while a first request
        # is in flight before the task exists (the listener's in-flight doorstep).
        self.start_task: Callable[[], None] | None = None
        # When the response to a request sent before the task existed is due (the
        # event loop's time): the task waits only what is left of the response timeout.
        self.response_due: float | None = None

    async def run(self, upstream: UpstreamConnection) -> LaneEnd:
        """Relay exchanges until one needs the task; say why."""
        self._attach(upstream)
        self.in_flight = False
        self._browser.channel.lane = self
        return await self._wait(self._settings.keepalive_timeout)

    def send(
        self, upstream: UpstreamConnection, head: RequestHead, request: UpstreamRequest
    ) -> None:
        """Send a bodiless ``request`` on ``upstream`` and take its response from the
        read callback from now on; :meth:`relay_one` (``sent``) waits for it."""
        upstream.channel.write(request.head)
        self.sent(upstream, head, request)

    def sent(
        self, upstream: UpstreamConnection, head: RequestHead, request: UpstreamRequest
    ) -> None:
        """``request`` was just written on ``upstream``: take its response from the read
        callback (call it before the event loop runs anything else)."""
        self._one = True
        self._sent(upstream, head, request)
        self._attach(upstream)

    async def relay_one(
        self,
        upstream: UpstreamConnection,
        head: RequestHead,
        request: UpstreamRequest,
        exchange: Exchange,
        sent: bool = False,
    ) -> collections.deque[Event] | None:
        """Send the task's bodiless ``request`` (unless :meth:`send` did: ``sent``) and
        relay its response from the read callback, as for a request the lane read
        itself: the response reaches the browser before the task wakes.

        ``None``: the response is relayed, and ``exchange`` says how the connections go
        on. Otherwise the response events read so far, for the task to carry on from
        (:meth:`~sandbridge.relay.listener.app_listener.AppListener._relay_response`); a failure
        is raised as the task's own reads raise it (:class:`UpstreamError`, the reader's
        :class:`HttpError`, a lost connection's :class:`OSError`).
        """
        timeout, due, self.response_due = self._settings.response_timeout, self.response_due, None
        try:
            if not sent:
                self.send(upstream, head, request)
            elif due is not None:
                timeout = max(0.0, due - asyncio.get_running_loop().time())
            end = await self._wait(timeout)
        finally:
            self._one = False
        exchange.response_started = self.answering
        if end is LaneEnd.DONE:
            exchange.keep_browser, exchange.reuse_upstream = self.keep_browser, self.reuse_upstream
            return None
        if end is LaneEnd.CONTINUE:
            return self.events
        if end is LaneEnd.RESPONSE_TIMEOUT:
            raise UpstreamError(no_response(self._settings.response_timeout))
        assert self.error is not None  # UPSTREAM_FAILED, ERROR
        raise self.error

    def drop(self, upstream: UpstreamConnection) -> None:
        """Close ``upstream`` if the lane still holds it (no task took it over)."""
        if upstream.channel.lane is self:
            upstream.channel.lane = None
            upstream.channel.abort()

    def _attach(self, upstream: UpstreamConnection) -> None:
        self._upstream = upstream
        self.end, self.error, self.answering = None, None, False
        self.events = collections.deque()
        upstream.channel.lane = self

    async def _wait(self, timeout: float) -> LaneEnd:
        """Until the lane ends (it may have ended already: a response that came before
        the task ran), or ``timeout``."""
        browser, upstream = self._browser, self._upstream
        assert upstream is not None
        try:
            if self.end is None:
                self._waiter = asyncio.get_running_loop().create_future()
                with browser.watchdog.limit(timeout):
                    await self._waiter
        except TimeoutError:
            if self.end is None:
                self.end = LaneEnd.RESPONSE_TIMEOUT if self.in_flight else LaneEnd.IDLE_TIMEOUT
        finally:
            self._waiter = None
            browser.channel.lane = None
            upstream.channel.lane = None
        assert self.end is not None
        return self.end

    def _finish(self, end: LaneEnd) -> None:
        if self.end is not None:
            return
        self.end = end
        self._browser.channel.lane = None
        if self._upstream is not None:
            self._upstream.channel.lane = None
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        start, self.start_task = self.start_task, None
        if start is not None:
            start()

    def time_out(self) -> None:
        """The response timeout passed before the connection's task existed."""
        self._finish(LaneEnd.RESPONSE_TIMEOUT if self.in_flight else LaneEnd.IDLE_TIMEOUT)

    # Channel's Lane protocol ------------------------------------------------------------

    def received(self, channel: Channel, data: bytes) -> None:
        if self.start_task is None and self._browser.watchdog.expired:
            # The timeout fired in this loop turn and the task is being woken for it:
            # these bytes come too late. (A request read now would reach the app and
            # then be answered as if the app had timed out.)
            self._finish(LaneEnd.RESPONSE_TIMEOUT if self.in_flight else LaneEnd.IDLE_TIMEOUT)
            return
        try:
            if channel is self._browser.channel:
                self._request_data(data)
            else:
                self._response_data(data)
        except Exception as exc:  # nothing may escape into the event loop
            self.error = exc
            self._finish(LaneEnd.ERROR)

    def interrupted(self, channel: Channel) -> None:
        upstream = self._upstream
        if channel is self._browser.channel:
            self._finish(LaneEnd.FALLBACK)  # the task reads the end of stream itself
        elif self.in_flight:
            self._finish(LaneEnd.CONTINUE)  # the task reads it: 502, or a close-delimited end
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
        if isinstance(head, RequestHead) and upstream is not None and self._takes(head, upstream):
            try:
                request = browser.heads.request(head, self._scope.origins)
            except HttpError:
                request = None  # the task refuses it, as it refuses any request
        if request is None or request.framing is not Framing.NONE:
            browser.events.extend(events)
            self._finish(LaneEnd.FALLBACK)
            return
        assert upstream is not None and isinstance(head, RequestHead)
        self._send(upstream, head, request)
        browser.watchdog.limit(self._settings.response_timeout)

    def _send(
        self, upstream: UpstreamConnection, head: RequestHead, request: UpstreamRequest
    ) -> None:
        upstream.channel.write(request.head)  # first: nothing else before the app's turn
        self._sent(upstream, head, request)

    def _sent(
        self, upstream: UpstreamConnection, head: RequestHead, request: UpstreamRequest
    ) -> None:
        upstream.expect_response(head.method)
        self.head, self.request, self.in_flight = head, request, True
        self.answering = False  # of this exchange: nothing of its response went out yet
        # A pipelined request waits in the channel until this exchange is over.
        self._browser.channel.lane = None

    def _takes(self, head: RequestHead, upstream: UpstreamConnection) -> bool:
        """Whether the lane relays this whole bodiless request head: no upgrade (the
        task's alone, so the lane never decides an upgrade's response), an app
        connection ready for it (an app that does not read its requests, or a reset in
        this same loop turn, is not), and admitted by a private app's gate."""
        return not head.upgrade and upstream.ready_for_exchange() and self._admitted(head)

    def _admitted(self, head: RequestHead) -> bool:
        """A private app's request passes here only with the app's cookie and no token."""
        gate = self._gate
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
            self._finish(LaneEnd.UPSTREAM_FAILED)
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
            self._finish(LaneEnd.CONTINUE)
            return
        decision = decide_response(
            final, self.head, self._browser.heads, close_delimited=reader.close_delimited
        )
        browser = self._browser.channel
        self.answering = True
        if body or decision.end:
            browser.write(b"".join([decision.head, *map(decision.body, body), decision.end]))
        else:
            browser.write(decision.head)
        self.in_flight = False
        self.keep_browser = decision.keep_browser
        self.reuse_upstream = decision.reuse_upstream(reader.extra_data)
        upstream.answered(self.reuse_upstream)
        if (
            not self._one
            and self.keep_browser
            and self.reuse_upstream
            and browser.ready_for_exchange()
            and not self._browser.parser.in_head  # (a pipelined head began: its timeout)
        ):
            browser.lane = self
            self._browser.watchdog.limit(self._settings.keepalive_timeout)
        else:
            self._finish(LaneEnd.DONE)
