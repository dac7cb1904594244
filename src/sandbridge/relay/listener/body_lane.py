"""A streamed response body relayed from the app's read callbacks: :func:`relay_body`.

An event stream (SSE), a long download or any body in many pieces cost the connection's
task a wake-up per piece: the app's read callback woke the task, which read, parsed and
wrote. Here the read callback does that itself, with the same parser, the same
``ResponseDecision.body`` and one write per read, so a piece reaches the browser within
the callback that received it. The task stays the owner: it waits while the body flows
and takes over again, at exactly the event the callback stopped at, for everything but
body pieces (the body's end, anything unexpected, a parse error, an end of stream or a
lost connection, a browser that stops taking bytes: backpressure is the task's
``drain``). Silence from the app still ends the stream after the response timeout: each
piece moves the task's watchdog on.
"""

from __future__ import annotations

import asyncio
import collections

from sandbridge.exceptions import UpstreamError
from sandbridge.protocol.http.exchange import ResponseDecision
from sandbridge.protocol.http.parser import BodyChunk, Event, ResponseReader
from sandbridge.relay.host.channel import Channel
from sandbridge.relay.listener.browser import BrowserConnection


class BodyLane:
    """Attached to the app's channel while a response body streams (see the module)."""

    __slots__ = (
        "_app",
        "_browser",
        "_decision",
        "_done",
        "_events",
        "_reader",
        "_timeout",
        "failed",
    )

    def __init__(  # noqa: PLR0913  (the task's own parts of the response, as it holds them)
        self,
        browser: BrowserConnection,
        app: Channel,
        reader: ResponseReader,
        decision: ResponseDecision,
        events: collections.deque[Event],
        timeout: float,
    ) -> None:
        self._browser = browser
        self._app = app
        self._reader = reader
        self._decision = decision
        self._events = events  # the task's: what the lane stopped at goes here
        self._timeout = timeout
        self._done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.failed: BaseException | None = None

    def received(self, channel: Channel, data: bytes) -> None:
        try:
            events = self._reader.feed(data)
        except Exception as exc:  # the task raises it, as it would have from its own feed
            self._stop(exc)
            return
        decision = self._decision
        out = []
        for index, event in enumerate(events):
            if type(event) is not BodyChunk:
                self._events.extend(events[index:])
                break
            out.append(decision.body(event.data))
        browser = self._browser.channel
        if out:
            try:
                browser.write(out[0] if len(out) == 1 else b"".join(out))
            except ConnectionResetError as exc:
                self._stop(exc)
                return
            self._browser.watchdog.extend(self._timeout)  # silence counts from this piece
        if self._events or not browser.ready_to_write():
            self._stop(None)

    def interrupted(self, channel: Channel) -> None:
        self._stop(None)  # (the channel recorded the end or the error: the task reads it)

    def _stop(self, failed: BaseException | None) -> None:
        # Detached at once: what the app sends next waits in its channel for the task.
        if self._app.lane is self:
            self._app.lane = None
        self.failed = failed
        if not self._done.done():
            self._done.set_result(None)

    async def wait(self) -> None:
        """Until the lane stopped; a failure it met is raised here."""
        await self._done
        if self.failed is not None:
            raise self.failed


async def relay_body(  # noqa: PLR0913  (the task's own parts of the response)
    browser: BrowserConnection,
    app: Channel,
    reader: ResponseReader,
    decision: ResponseDecision,
    events: collections.deque[Event],
    timeout: float,
) -> None:
    """Relay body pieces from ``app``'s read callbacks until anything else comes (left in
    ``events`` for the task), then wait for the browser to take what was written. Only
    when nothing is unread on ``app`` and no lane is attached."""
    lane = BodyLane(browser, app, reader, decision, events, timeout)
    app.lane = lane
    try:
        with browser.watchdog.limit(timeout):
            await lane.wait()
    except TimeoutError:
        raise UpstreamError(f"app sent nothing for {timeout:g} s mid-response") from None
    finally:
        if app.lane is lane:
            app.lane = None
    await browser.channel.drain()
