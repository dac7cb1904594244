"""A streamed response body relayed from the app connection's read callback:
:class:`BodyLane`.

Why: each piece of a streamed body (an event of an event stream, a line of a log, a
token of a model's answer) woke the connection's task: the app's bytes were put in the
channel, a future was resolved, the task was scheduled and resumed through its chain of
coroutines, the read's timeout was armed and cleared, and only then was the piece parsed
and written. Between two events ten milliseconds apart the relay sleeps, its caches go
cold, and that walk through the event loop, the task and the channel cost about 50 µs of
an event's delay on the project's machine, more than the parse and the write together
(docs/history/benchmark-rounds.md, "The body lane, third time (2026-12-08)").

How: once the final response head has gone to the browser and the request's body (if
any) is all sent, the task attaches a lane to the app's channel (:attr:`Channel.lane`)
and sleeps. Each read from the app is fed to the same response reader and each body
piece framed by the same decision (:meth:`ResponseDecision.body`), then written to the
browser right in the callback. The lane moves the task's watchdog at each read, so the
response timeout means what it always did: the app's silence, counted from its last
bytes.

Anything else gives the connection back to the task at exactly that point, with the
events the lane did not use: the end of the message (and whatever follows it), an
unexpected event, a full write buffer toward the browser (the task waits for it to
drain), the app's end of stream, an error (raised in the task, as the task's own read
would have raised it), the browser's connection lost (the task's drain raises for it at
once: the task, which waited on the app's reads, used to notice only at the app's next
piece or after the response timeout). The browser gets the same head and body the task
would send, each piece framed by the same decision (a chunk per read from the app, as the
task's chunks follow its reads).
"""

from __future__ import annotations

import asyncio

from sandbridge.exceptions import UpstreamError
from sandbridge.protocol.http.exchange import ResponseDecision
from sandbridge.protocol.http.parser import BodyChunk, Event, ResponseReader
from sandbridge.relay.host.channel import Channel
from sandbridge.relay.listener.browser import BrowserConnection
from sandbridge.relay.listener.exchange_io import silent_mid_response


class BodyLane:
    """Relays the body of one response from the app's reads to the browser while the
    connection's task waits for :attr:`done`."""

    __slots__ = ("_body", "_browser", "_reader", "_timeout", "_upstream", "_watchdog", "done")

    def __init__(
        self,
        reader: ResponseReader,
        decision: ResponseDecision,
        browser: BrowserConnection,
        upstream: Channel,
        response_timeout: float,
    ) -> None:
        self._reader = reader
        self._body = decision.body
        self._browser = browser.channel
        self._upstream = upstream
        self._watchdog = browser.watchdog
        self._timeout = response_timeout
        # The events for the task (the first that is not a body piece and what came
        # with it), or what the task raises: what the task's own read would have raised.
        self.done: asyncio.Future[list[Event]] = asyncio.get_running_loop().create_future()

    def received(self, channel: Channel, data: bytes) -> None:
        if self._watchdog.expired:
            # The timeout fired in this loop turn and the task is being cancelled for
            # it: these bytes come too late, as they would for the task's own read.
            self._stop([])
            return
        self._watchdog.limit(self._timeout)  # the app spoke: its silence counts anew
        try:
            events = self._reader.feed(data)
            body = self._body
            pieces: list[bytes] = []
            left: list[Event] = []
            for index, event in enumerate(events):
                if type(event) is not BodyChunk:
                    left = events[index:]
                    break
                pieces.append(body(event.data))
            if pieces:
                self._browser.write(pieces[0] if len(pieces) == 1 else b"".join(pieces))
        except Exception as exc:  # raised in the task, which decides, as for its own read
            self._stop(exc)
            return
        if left or self._browser.send_waits():
            # A full write buffer (the task drains it), or a browser gone at this very
            # write (the task's drain raises, as its send would have).
            self._stop(left)

    def browser_lost(self, closed: asyncio.Future[None]) -> None:
        """The browser's connection is gone (a reset, an error): the task's drain raises
        for it now, not at the app's next piece, which may be minutes away."""
        self._stop([])

    def interrupted(self, channel: Channel) -> None:
        """The app's end of stream or a lost connection: the channel recorded it, and
        the task's next read meets it."""
        self._stop([])

    def _stop(self, outcome: list[Event] | Exception) -> None:
        if self._upstream.lane is self:
            self._upstream.lane = None
        if not self.done.done():
            if isinstance(outcome, Exception):
                self.done.set_exception(outcome)
            else:
                self.done.set_result(outcome)


def lane_ready(browser: BrowserConnection, upstream: Channel) -> bool:
    """Whether a body lane may take the app's next reads: nothing of the app's unread
    (it would be relayed after what comes next), no end of stream or error waiting for
    the task, no lane already, and room toward the browser."""
    return (
        upstream.lane is None and upstream.ready_for_exchange() and not browser.channel.send_waits()
    )


async def relay_body(
    reader: ResponseReader,
    decision: ResponseDecision,
    browser: BrowserConnection,
    upstream: Channel,
    response_timeout: float,
) -> list[Event]:
    """Relay body pieces from the app's read callbacks until the task is needed; return
    the events for the task (maybe none: then the next read, or a drain, is the task's)."""
    lane = BodyLane(reader, decision, browser, upstream, response_timeout)
    upstream.lane = lane
    browser_closed = browser.channel.closed
    browser_closed.add_done_callback(lane.browser_lost)
    done = lane.done
    try:
        with browser.watchdog.limit(response_timeout):
            return await done
    except TimeoutError:
        if not done.cancelled():
            raise  # the lane's own, not the watchdog's
        raise UpstreamError(silent_mid_response(response_timeout)) from None
    finally:
        if upstream.lane is lane:
            upstream.lane = None
        browser_closed.remove_done_callback(lane.browser_lost)
        if done.done() and not done.cancelled():
            done.exception()  # seen, even when the task was cancelled as the lane failed
