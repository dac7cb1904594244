"""The browser side of one connection on an app's host origin: :class:`BrowserConnection`."""

from __future__ import annotations

import collections

from sandbridge.aio.watchdog import Watchdog
from sandbridge.exceptions import HttpError
from sandbridge.protocol.http.forwarding import ConnectionHeads
from sandbridge.protocol.http.parser import Event, RequestReader
from sandbridge.relay.host.channel import Channel


class BrowserConnection:
    """The browser side of one connection: a socket, its request reader and the
    translation of its heads."""

    # Every timeout of this connection's task (keep-alive, header, response): set by
    # whoever starts the task, as it starts it.
    watchdog: Watchdog

    def __init__(
        self, channel: Channel, heads: ConnectionHeads, parser: RequestReader | None = None
    ) -> None:
        """``parser``: a reader another connection left reusable, else a new one."""
        self.channel = channel
        self.parser = RequestReader() if parser is None else parser
        self.events: collections.deque[Event] = collections.deque()
        self.heads = heads
        # A refusal of what was read before the task ran, for the task to send.
        self.failed: HttpError | None = None
        # Its next request was sent once already on an idle app connection that the app
        # closed (the front door's): it takes no idle one again (app_pool.py's rule).
        self.no_parked = False

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

    def between_requests(self) -> bool:
        """Nothing of a next request read yet (not even part of a head), nothing unread,
        and room in the write buffer: a next request may start from the socket."""
        return not self.events and not self.parser.in_head and self.channel.ready_for_exchange()
