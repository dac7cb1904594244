"""A loop of readers, writers and timers over the standard library's ``poll``, for a
process that has no event loop yet, with asyncio's method names so that what it runs
moves onto the event loop unchanged.

The sandbox entry serves the shim's common case on it (:mod:`sandbridge.relay.inside.light_shim`):
``import asyncio`` alone costs the shim more memory than all the rest of it (``ssl``
loads OpenSSL), and a session whose shim only ever hands connections over never needs
it. When something does need the event loop, :meth:`PollLoop.move_to` registers every
reader, writer and pending timer on it, and from then on the handlers' calls on this
loop are passed to it: connections in progress go on being served, by the same code.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import select
import socket
import sys
import time
from collections.abc import Callable

TYPE_CHECKING = False  # typing's, without importing typing for it
if TYPE_CHECKING:
    import asyncio

Callback = Callable[[], object]

_READ = select.POLLIN | select.POLLPRI
_WRITE = select.POLLOUT
# What wakes a reader and a writer alike: the peer hung up or the socket failed; the
# callback's own read or write then says how.
_TROUBLE = select.POLLHUP | select.POLLERR

# Connections accepted per wake-up of a listener, so that a burst of new ones does not
# starve the connections already open (asyncio's servers accept in bursts too).
ACCEPT_BURST = 64
# Out of descriptors or memory, a listener rests this long before accepting again
# (asyncio's servers wait 1 s too) rather than wake at once for the same failure.
ACCEPT_RETRY_DELAY = 1.0


class Timer:
    """A callback due at ``when`` (``time.monotonic``), until cancelled."""

    def __init__(self, when: float, callback: Callback) -> None:
        self.when = when
        self._callback: Callback | None = callback
        # The event loop's handle, once the timer moved there.
        self._moved: asyncio.TimerHandle | None = None

    def cancel(self) -> None:
        """Never call the callback (on the event loop too, if the timer moved there)."""
        self._callback = None
        if self._moved is not None:
            self._moved.cancel()

    def cancelled(self) -> bool:
        """Whether it was cancelled or has fired."""
        return self._callback is None

    def _fire(self) -> None:
        callback, self._callback = self._callback, None
        if callback is not None:
            callback()


class PollLoop:
    """Readers and writers (one callback each per descriptor) and timers, run by
    :meth:`run` until :meth:`stop`."""

    def __init__(self) -> None:
        self._poll = select.poll()
        self._readers: dict[int, Callback] = {}
        self._writers: dict[int, Callback] = {}
        self._timers: list[tuple[float, int, Timer]] = []
        self._count = 0  # orders timers due at the same time
        self._stopped = False
        self._target: asyncio.AbstractEventLoop | None = None

    def add_reader(self, fd: int, callback: Callback) -> None:
        """Call ``callback`` whenever ``fd`` is readable (or hung up, or failed)."""
        if self._target is not None:
            self._target.add_reader(fd, callback)
            return
        self._readers[fd] = callback
        self._register(fd)

    def remove_reader(self, fd: int) -> bool:
        """Stop watching ``fd`` for reading; whether it was watched."""
        if self._target is not None:
            return self._target.remove_reader(fd)
        found = self._readers.pop(fd, None) is not None
        self._register(fd)
        return found

    def add_writer(self, fd: int, callback: Callback) -> None:
        """Call ``callback`` whenever ``fd`` is writable (or hung up, or failed)."""
        if self._target is not None:
            self._target.add_writer(fd, callback)
            return
        self._writers[fd] = callback
        self._register(fd)

    def remove_writer(self, fd: int) -> bool:
        """Stop watching ``fd`` for writing; whether it was watched."""
        if self._target is not None:
            return self._target.remove_writer(fd)
        found = self._writers.pop(fd, None) is not None
        self._register(fd)
        return found

    def call_later(self, delay: float, callback: Callback) -> Timer:
        """Call ``callback`` once, ``delay`` seconds from now, unless cancelled."""
        timer = Timer(time.monotonic() + delay, callback)
        if self._target is not None:
            timer._moved = self._target.call_later(delay, timer._fire)
        else:
            self._count += 1
            heapq.heappush(self._timers, (timer.when, self._count, timer))
        return timer

    def stop(self) -> None:
        """Return from :meth:`run` once the callbacks now running are done."""
        self._stopped = True

    def run(self) -> None:
        """Wait for descriptors and timers and run their callbacks, until :meth:`stop`."""
        assert self._target is None, "the loop moved to the event loop"
        self._stopped = False
        while not self._stopped:
            events = self._poll.poll(self._timeout_ms())
            for fd, mask in events:
                if mask & select.POLLNVAL:  # closed while registered: a handler's bug
                    self._readers.pop(fd, None)
                    self._writers.pop(fd, None)
                    self._register(fd)
                    continue
                # Looked up one at a time: a callback may remove the other, or close it.
                if mask & (_READ | _TROUBLE) and fd in self._readers:
                    _call(self._readers[fd])
                if mask & (_WRITE | _TROUBLE) and fd in self._writers:
                    _call(self._writers[fd])
            self._run_due_timers()

    def move_to(self, loop: asyncio.AbstractEventLoop) -> None:
        """Register every reader, writer and pending timer on ``loop`` (the running event
        loop) and pass every later call to it; this loop is not run again. Moving it
        again to the same loop does nothing."""
        if self._target is loop:
            return
        assert self._target is None, "the loop moved to another event loop"
        now = time.monotonic()
        for fd, callback in self._readers.items():
            loop.add_reader(fd, callback)
        for fd, callback in self._writers.items():
            loop.add_writer(fd, callback)
        for when, _, timer in self._timers:
            if not timer.cancelled():
                timer._moved = loop.call_later(max(0.0, when - now), timer._fire)
        for fd in {*self._readers, *self._writers}:
            self._poll.unregister(fd)
        self._readers.clear()
        self._writers.clear()
        self._timers.clear()
        self._target = loop

    def _register(self, fd: int) -> None:
        mask = (_READ if fd in self._readers else 0) | (_WRITE if fd in self._writers else 0)
        if mask:
            self._poll.register(fd, mask)  # register modifies a registered descriptor
        else:
            with contextlib.suppress(KeyError):  # never registered
                self._poll.unregister(fd)

    def _timeout_ms(self) -> int | None:
        while self._timers and self._timers[0][2].cancelled():
            heapq.heappop(self._timers)
        if not self._timers:
            return None
        return max(0, math.ceil((self._timers[0][0] - time.monotonic()) * 1000))

    def _run_due_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, timer = heapq.heappop(self._timers)
            _call(timer._fire)


class Acceptor:
    """Accepts connections on a listening socket for as long as it is started, and gives
    each, non-blocking, to ``accepted``: in bursts of :data:`ACCEPT_BURST`, resting
    :data:`ACCEPT_RETRY_DELAY` when out of descriptors or memory."""

    def __init__(
        self,
        loop: PollLoop,
        listener: socket.socket,
        accepted: Callable[[socket.socket], object],
    ) -> None:
        self._loop = loop
        self._listener = listener
        self._accepted = accepted
        self._retry: Timer | None = None

    def start(self) -> None:
        """Accept connections."""
        self._retry = None
        self._loop.add_reader(self._listener.fileno(), self._accept)

    def stop(self) -> None:
        """Accept no more (the listener stays open)."""
        self._loop.remove_reader(self._listener.fileno())
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    def _accept(self) -> None:
        for _ in range(ACCEPT_BURST):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError:  # out of descriptors or memory: rest, then try again
                self.stop()
                self._retry = self._loop.call_later(ACCEPT_RETRY_DELAY, self.start)
                return
            sock.setblocking(False)
            self._accepted(sock)


def _call(callback: Callback) -> None:
    """Run one callback; an exception is reported and the loop goes on, as asyncio's
    does (the process serving this loop must outlive any one connection's handler)."""
    try:
        callback()
    except Exception as exc:
        print(f"sandbridge: a callback failed: {exc!r}", file=sys.stderr)
