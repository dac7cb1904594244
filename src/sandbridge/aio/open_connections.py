"""The connections a server's handlers hold, so closing the server ends them all.

``asyncio.Server.close`` stops accepting but leaves handlers running; a tunnel whose two
ends are both idle would then outlive its session (and be cancelled at loop shutdown,
which asyncio reports as an unhandled error). :class:`OpenConnections` aborts every
tracked transport instead, so each handler sees its streams end and returns by itself,
and waits for the handlers, with a bounded grace.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from sandbridge.aio.tasks import TaskSet

# Handlers whose streams were aborted return within milliseconds; one still running after
# this long is stuck elsewhere and is cancelled.
CLOSE_GRACE = 5.0


class OpenConnections:
    """Tracks handler tasks and their stream writers (both ends of each bridge)."""

    def __init__(self) -> None:
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks = TaskSet()
        self.closing = False

    @contextlib.contextmanager
    def handler(self, writer: asyncio.StreamWriter) -> Iterator[None]:
        """Run a connection's handler under this set; ``writer`` is its client end."""
        self._writers.add(writer)
        try:
            with self._tasks.current():
                yield
        finally:
            self._writers.discard(writer)

    @contextlib.contextmanager
    def track(self, writer: asyncio.StreamWriter) -> Iterator[asyncio.StreamWriter]:
        """Track another end (the upstream) while the block runs; abort it at once if
        the set is already closing."""
        if self.closing:
            writer.transport.abort()
        self._writers.add(writer)
        try:
            yield writer
        finally:
            self._writers.discard(writer)

    async def close(self) -> None:
        """Abort every tracked stream and wait for the handlers to return."""
        self.closing = True
        for writer in list(self._writers):
            writer.transport.abort()
        await self._tasks.close(grace=CLOSE_GRACE)
