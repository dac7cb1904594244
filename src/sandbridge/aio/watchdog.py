"""One reusable timeout per connection: :class:`Watchdog`.

``asyncio.timeout()`` builds a ``Timeout`` object and schedules and cancels a timer
(a heap push and a removal in the event loop) for every wait it guards. The relay waits
with a timeout two or three times per request, and at high request rates that
bookkeeping was 14% of the host's samples at c=64 (docs/history/benchmark-rounds.md). A watchdog
keeps one timer per connection: arming it only stores a deadline; its timer fires at
most once per period, and when the deadline has moved on in the meantime it re-arms
itself for the new one instead of expiring.

The semantics are those of ``asyncio.timeout``: the guarded block is cancelled at the
deadline and the cancellation comes out of the ``with`` as :class:`TimeoutError`.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any


class Watchdog:
    """A timeout for the task that creates it, re-armed by each ``with watchdog.limit(s)``.

    Only one guarded block may be open at a time (blocks do not nest), and only the
    task that created the watchdog may use it.
    """

    __slots__ = ("_deadline", "_expired", "_handle", "_loop", "_task", "_when")

    def __init__(self, task: asyncio.Task[Any] | None = None) -> None:
        """The watchdog of ``task``, or of the running task."""
        self._loop = asyncio.get_running_loop()
        task = task or asyncio.current_task()
        assert task is not None, "a watchdog belongs to a task"
        self._task = task
        self._deadline: float | None = None  # None: no block is guarded
        self._handle: asyncio.TimerHandle | None = None
        self._when = 0.0  # when ``_handle`` fires
        self._expired = False

    def limit(self, seconds: float) -> Watchdog:
        """Guard the next ``with`` block: it may last ``seconds``."""
        deadline = self._loop.time() + seconds
        self._deadline = deadline
        # (``_expired`` is left alone: a callback that moves the deadline after the
        # timer fired, before the task resumed, must not hide the timeout; __exit__
        # clears it.)
        if self._handle is None or self._when > deadline:
            # No timer, or one that would fire too late: (re)schedule. A timer due
            # earlier is left alone; it re-arms itself for this deadline when it fires.
            if self._handle is not None:
                self._handle.cancel()
            self._when = deadline
            self._handle = self._loop.call_at(deadline, self._fire)
        return self

    def extend(self, seconds: float) -> None:
        """Move the open block's deadline to ``seconds`` from now: a callback working for
        the guarded task (a piece of its stream relayed) may, as the task itself may."""
        self.limit(seconds)

    @property
    def expired(self) -> bool:
        """Whether the guarded block's time is up (its task is being cancelled)."""
        return self._expired

    def close(self) -> None:
        """Drop the timer (the connection is over)."""
        self._deadline = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def __enter__(self) -> Watchdog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._deadline = None
        if self._expired:
            self._expired = False
            # Like asyncio.timeout: our cancellation becomes a TimeoutError, unless
            # someone else cancelled the task as well.
            if self._task.uncancel() == 0 and exc_type is asyncio.CancelledError:
                raise TimeoutError from exc

    def _fire(self) -> None:
        self._handle = None
        deadline = self._deadline
        if deadline is None:
            return  # no block is guarded now; the next limit() schedules anew
        if deadline <= self._when:
            self._expired = True
            self._task.cancel()
        else:
            self._when = deadline
            self._handle = self._loop.call_at(deadline, self._fire)
