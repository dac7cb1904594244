"""Structured concurrency in two shapes, so that no task outlives its owner.

- :func:`running`: start coroutines together for the length of an ``async with`` block;
  however the block ends, each task still running is cancelled and all are awaited.
  With :func:`first_done` this is "run these until the first one ends".
- :class:`TaskSet`: tasks an object starts one at a time (a task per connection), each
  forgotten when it ends; :meth:`TaskSet.close` cancels and awaits the rest.

``asyncio.TaskGroup`` cancels the others only when one fails, and re-raises every
failure as an ``ExceptionGroup``; sandbridge's tasks end normally when a peer leaves,
and what one task's end means is the caller's to decide.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager
from typing import Any

Task = asyncio.Task[Any]


@asynccontextmanager
async def running(*coroutines: Coroutine[Any, Any, Any]) -> AsyncIterator[tuple[Task, ...]]:
    """The coroutines as tasks for the block's length; cancelled and awaited at its end."""
    tasks = tuple(asyncio.create_task(coroutine) for coroutine in coroutines)
    try:
        yield tasks
    finally:
        await cancel_all(tasks)


async def first_done(*tasks: Task) -> set[Task]:
    """Wait until at least one of ``tasks`` is done; return those that are."""
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    return done


async def cancel_all(tasks: tuple[Task, ...] | list[Task]) -> None:
    """Cancel each task still running and wait for all of them (their errors are theirs)."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class TaskSet:
    """Tasks owned by one object, started one at a time; each leaves the set when done."""

    def __init__(self) -> None:
        self._tasks: set[Task] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """Own the running task (a server's connection handler) while the block runs."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            yield
        finally:
            self._tasks.discard(task)

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(list(self._tasks))

    async def close(self, grace: float = 0.0) -> None:
        """Give the tasks ``grace`` seconds to end by themselves, then cancel every task
        still running and wait for all of them."""
        tasks = list(self._tasks)
        if tasks and grace > 0:
            await asyncio.wait(tasks, timeout=grace)
        await cancel_all(tasks)
