"""Browser connections that have no task (yet): :class:`Doorstep`.

Why: a browser connection's task used to start at accept, set its connection up and
then wait for the request, so a new connection cost a task wake-up more than its
exchange needed, and that set-up ran while the client was still connecting (on a
loaded machine the relay's wake-up at accept delays the client's own connect). Now an
accepted connection waits here, counted against the limits already, and its task
starts when its first bytes (or its end) arrive. When those bytes are a request sent
at once from the callback that read them (:func:`~sandbridge.relay.listener.lane.send_first`),
the connection waits in a second doorstep until its response is relayed, and only then
does its task start: the task's set-up no longer runs while the app answers (on 2 cores
it held up the app's own wake-up).

Limits and timeouts are the same as with a task per accept: the connection counts
toward the connection limits from accept on, one that sends nothing for the keep-alive
timeout is closed, and a first request whose response does not start within the
response timeout is a 502 (one timer per doorstep, armed for the oldest; the timeout is
the same for all, so the oldest is the first due).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Generic, TypeVar

from sandbridge import log
from sandbridge.protocol.http.forwarding import error_response
from sandbridge.relay.host.channel import Channel

T = TypeVar("T")


async def refuse(channel: Channel, port: int) -> None:
    """A connection past the connection limits: a 503, and it never counts."""
    log.debug("connection.refused", port=port, reason="connection limit")
    with contextlib.suppress(OSError):
        channel.write(error_response(503, "too many open connections to this relay"))
        await channel.linger_close()
    channel.abort()


class Doorstep(Generic[T]):
    """Connections of one app listener that have no task (yet), each with a ``T``.

    It is their channels' lane (:attr:`Channel.lane`) while they wait: bytes or the end
    of stream from the browser hand the channel to ``start``, and ``expire`` gets those
    still here after ``timeout`` seconds. A listener keeps two, each connection with its
    :class:`~sandbridge.relay.listener.connection.Connection`: connections that have sent nothing
    yet (stage ``waiting``), and connections whose first request went out from the
    callback that read it and whose response has not come yet (``in-flight``: their task
    starts when it comes, :class:`~sandbridge.relay.listener.lane.KeepAliveLane`).
    """

    def __init__(
        self,
        timeout: float,
        start: Callable[[Channel, T], None],
        expire: Callable[[Channel, T], None],
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._timeout = timeout
        self._start = start
        self._expire = expire
        # channel -> (deadline, its T); insertion order is deadline order
        self._waiting: dict[Channel, tuple[float, T]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._waiting)

    def wait(self, channel: Channel, tag: T) -> float:
        """Keep ``channel`` until it sends something, ends, expires or :meth:`leave`;
        returns when it expires (the event loop's time)."""
        deadline = self._loop.time() + self._timeout
        self._waiting[channel] = (deadline, tag)
        channel.lane = self
        if self._timer is None:
            self._timer = self._loop.call_at(deadline, self._sweep)
        return deadline

    def leave(self, channel: Channel) -> None:
        """``channel`` goes on elsewhere (its task starts): forget it here."""
        if self._waiting.pop(channel, None) is not None and channel.lane is self:
            channel.lane = None

    def close(self) -> list[tuple[Channel, T]]:
        """Stop waiting: the channels still here, for the listener to drop."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting = [(channel, tag) for channel, (_, tag) in self._waiting.items()]
        self._waiting.clear()
        for channel, _ in waiting:
            channel.lane = None
        return waiting

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
            deadline, tag = waiting[channel]
            if deadline > now:
                self._timer = self._loop.call_at(deadline, self._sweep)
                return
            del waiting[channel]
            channel.lane = None
            self._expire(channel, tag)
