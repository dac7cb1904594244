"""Servers under test on an event loop in a thread of their own, as a session serves them
beside its other work, while the test calls them from its own thread as a client would.

A harness subclasses :class:`LoopThread`: it sets up its servers, then calls
``LoopThread.__init__``, which runs :meth:`~LoopThread.start_servers` on a new loop in a
new thread and returns once that has ended (or raises what it raised); the loop then
serves until :meth:`~LoopThread.stop`, which runs :meth:`~LoopThread.close_servers` there
and ends the thread. What asyncio would report as unhandled (an exception in a callback,
a task whose exception nobody retrieved) is kept in :attr:`~LoopThread.errors` for the
test to check.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

# Starting a server on a Unix socket, or one call of a test on the loop, takes well under
# a second; a machine running the whole suite may take many times that.
START_TIMEOUT = 10.0
CALL_TIMEOUT = 10.0
# Closing waits for the servers' connections to end, each within its own short timeout.
STOP_TIMEOUT = 30.0


class LoopThread:
    """The base of a harness whose servers run on a loop in a thread of their own."""

    loop: asyncio.AbstractEventLoop

    def __init__(self) -> None:
        self.errors: list[dict[str, object]] = []
        self._started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),))
        self._thread.start()
        try:
            self._started.result(START_TIMEOUT)
        except BaseException:
            self._thread.join(STOP_TIMEOUT)
            raise

    async def start_servers(self) -> None:
        """Start the servers (on the loop); the test goes on once this returns."""
        raise NotImplementedError

    async def close_servers(self) -> None:
        """Close the servers (on the loop), at :meth:`stop`."""
        raise NotImplementedError

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.loop.set_exception_handler(lambda _, context: self.errors.append(context))
        self._stopping = asyncio.Event()
        try:
            await self.start_servers()
        except BaseException as exc:
            self._started.set_exception(exc)
            return
        self._started.set_result(None)
        await self._stopping.wait()
        await self.close_servers()

    @property
    def running(self) -> bool:
        """Whether the loop's thread still runs (until :meth:`stop` has closed the servers)."""
        return self._thread.is_alive()

    def on_loop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and return its result: a server's own method,
        called as its owner's code would call it."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(CALL_TIMEOUT)

    def stop(self) -> None:
        """Close the servers and end the thread (a second call does nothing more)."""
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(STOP_TIMEOUT)
        assert not self._thread.is_alive(), "the servers did not close"
