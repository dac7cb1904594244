"""No task outlives its owner: ``running`` blocks and ``TaskSet``."""

from __future__ import annotations

import asyncio

import pytest

from sandbridge.aio.tasks import TaskSet, first_done, running


async def _forever(started: asyncio.Event) -> None:
    started.set()
    await asyncio.Event().wait()


def test_running_cancels_what_is_left_when_the_first_ends() -> None:
    async def scenario() -> tuple[bool, bool]:
        started, release = asyncio.Event(), asyncio.Event()
        async with running(release.wait(), _forever(started)) as (quick, slow):
            await started.wait()
            release.set()
            assert await first_done(quick, slow) == {quick}
        return slow.cancelled(), quick.cancelled()

    assert asyncio.run(scenario()) == (True, False)


def test_running_cancels_its_tasks_when_the_block_raises() -> None:
    tasks: list[asyncio.Task[object]] = []

    async def scenario() -> None:
        started = asyncio.Event()
        async with running(_forever(started)) as (task,):
            tasks.append(task)
            await started.wait()
            raise LookupError("the block failed")

    with pytest.raises(LookupError):
        asyncio.run(scenario())
    assert tasks[0].cancelled()


def test_a_task_set_forgets_finished_tasks_and_closes_the_rest() -> None:
    async def scenario() -> tuple[int, int, bool]:
        owned = TaskSet()
        started = asyncio.Event()
        finished = owned.spawn(asyncio.sleep(0))
        stuck = owned.spawn(_forever(started))
        await finished
        await started.wait()
        during = len(owned)
        await owned.close()
        return during, len(owned), stuck.cancelled()

    assert asyncio.run(scenario()) == (1, 0, True)


def test_a_task_set_gives_its_tasks_the_grace_to_end_by_themselves() -> None:
    async def scenario() -> tuple[bool, bool]:
        owned = TaskSet()
        stopping = asyncio.Event()

        async def ends_when_asked() -> None:
            await stopping.wait()

        polite = owned.spawn(ends_when_asked())
        asyncio.get_running_loop().call_soon(stopping.set)
        await owned.close(grace=30)
        return polite.cancelled(), polite.done()

    assert asyncio.run(scenario()) == (False, True)


def test_a_task_set_owns_the_current_task_while_a_block_runs() -> None:
    async def scenario() -> tuple[int, int]:
        owned = TaskSet()
        inside: list[int] = []

        async def handler() -> None:
            with owned.current():
                inside.append(len(owned))

        await asyncio.create_task(handler())
        return inside[0], len(owned)

    assert asyncio.run(scenario()) == (1, 0)
