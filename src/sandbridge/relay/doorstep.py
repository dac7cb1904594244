"""Browser connections between accept and their first bytes: :class:`Doorstep`.

Why: a browser connection's task used to start at accept, set its connection up and
then wait for the request, so a new connection cost a task wake-up more than its
exchange needed, and that set-up ran while the client was still connecting (on a
loaded machine the relay's wake-up at accept delays the client's own connect). Now an
accepted connection waits here, counted against the limits already, and its task
starts when its first bytes (or its end) arrive: the task's first read finds the
request waiting.

Limits and timeouts are the same as with a task per accept: the connection counts
toward the connection limits from accept on, and one that sends nothing for the
keep-alive timeout is closed (one timer for all the connections waiting here, armed
for the oldest; the timeout is the same for all, so the oldest is the first due).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from sandbridge import log
from sandbridge.protocol.http.forwarding import error_response
from sandbridge.relay.channel import Channel


async def refuse(channel: Channel, port: int) -> None:
    """A connection past the connection limits: a 503, and it never counts."""
    log.debug("connection.refused", port=port, reason="connection limit")
    with contextlib.suppress(OSError):
        channel.write(error_response(503, "too many open connections to this relay"))
        await channel.linger_close()
    channel.abort()


class Doorstep:
    """The accepted connections of one app listener that have sent nothing yet.

    It is their channels' lane (:attr:`Channel.lane`) while they wait: the first bytes
    or the end of stream hand the channel to ``start``, and ``expire`` gets those that
    stay silent for ``timeout`` seconds.
    """

    def __init__(
        self,
        timeout: float,
        start: Callable[[Channel, str], None],
        expire: Callable[[Channel], None],
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._timeout = timeout
        self._start = start
        self._expire = expire
        # channel -> (deadline, client address); insertion order is deadline order
        self._waiting: dict[Channel, tuple[float, str]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._waiting)

    def wait(self, channel: Channel, client_host: str) -> None:
        """Keep ``channel`` until it sends something (from ``client_host``)."""
        deadline = self._loop.time() + self._timeout
        self._waiting[channel] = (deadline, client_host)
        channel.lane = self
        if self._timer is None:
            self._timer = self._loop.call_at(deadline, self._sweep)

    def close(self) -> list[Channel]:
        """Stop waiting: the channels still here, for the listener to drop."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        channels = list(self._waiting)
        self._waiting.clear()
        for channel in channels:
            channel.lane = None
        return channels

    # Channel's Lane protocol ------------------------------------------------------------

    def received(self, channel: Channel, data: bytes) -> None:
        channel.lane = None
        channel.data_received(data)  # buffered, as for any read the task has not made yet
        self._arrived(channel)

    def interrupted(self, channel: Channel) -> None:
        channel.lane = None  # the channel has recorded the end; the task reads it
        self._arrived(channel)

    # ------------------------------------------------------------------------------------

    def _arrived(self, channel: Channel) -> None:
        waiting = self._waiting.pop(channel, None)
        if waiting is not None:
            self._start(channel, waiting[1])

    def _sweep(self) -> None:
        self._timer = None
        now = self._loop.time()
        waiting = self._waiting
        while waiting:
            channel = next(iter(waiting))
            deadline = waiting[channel][0]
            if deadline > now:
                self._timer = self._loop.call_at(deadline, self._sweep)
                return
            del waiting[channel]
            channel.lane = None
            self._expire(channel)
