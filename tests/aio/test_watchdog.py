"""The per-connection watchdog keeps asyncio.timeout's semantics with one timer."""

from __future__ import annotations

import asyncio

import pytest

from sandbridge.aio import event_loop
from sandbridge.aio.watchdog import Watchdog


def test_a_block_past_its_limit_raises_timeout_error() -> None:
    async def main() -> None:
        watchdog = Watchdog()
        with pytest.raises(TimeoutError), watchdog.limit(0.01):
            await asyncio.sleep(10)

    event_loop.run(main())


def test_a_block_within_its_limit_is_not_cancelled() -> None:
    async def main() -> str:
        watchdog = Watchdog()
        with watchdog.limit(10):
            await asyncio.sleep(0)
        return "done"

    assert event_loop.run(main()) == "done"


def test_a_later_deadline_keeps_a_block_alive_past_the_first_timer() -> None:
    async def main() -> None:
        watchdog = Watchdog()
        with watchdog.limit(0.02):
            await asyncio.sleep(0)
        # The first timer fires during this block and must re-arm, not cancel it.
        with watchdog.limit(0.2):
            await asyncio.sleep(0.05)
        with pytest.raises(TimeoutError), watchdog.limit(0.05):
            await asyncio.sleep(10)

    event_loop.run(main())


def test_a_shorter_limit_after_a_longer_one_expires_on_time() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        watchdog = Watchdog()
        with watchdog.limit(60):
            await asyncio.sleep(0)
        start = loop.time()
        with pytest.raises(TimeoutError), watchdog.limit(0.02):
            await asyncio.sleep(10)
        return loop.time() - start

    assert event_loop.run(main()) < 5


def test_a_timer_that_fires_between_blocks_does_nothing() -> None:
    async def main() -> None:
        watchdog = Watchdog()
        with watchdog.limit(0.01):
            pass
        await asyncio.sleep(0.05)  # the timer fires with no block guarded
        with watchdog.limit(10):
            await asyncio.sleep(0.01)
        watchdog.close()

    event_loop.run(main())


def test_an_outside_cancellation_stays_a_cancellation() -> None:
    async def main() -> None:
        async def guarded() -> None:
            watchdog = Watchdog()
            with watchdog.limit(10):
                await asyncio.sleep(10)

        task = asyncio.create_task(guarded())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    event_loop.run(main())


def test_a_deadline_moved_after_the_timer_fired_does_not_hide_the_timeout() -> None:
    """A read callback may move the deadline in the loop turn in which the timer fired,
    before the task resumes: the block must still end with TimeoutError, not with a
    bare cancellation that would end the connection's task."""

    async def main() -> bool:
        watchdog = Watchdog()
        loop = asyncio.get_running_loop()
        seen: list[bool] = []

        def late_callback() -> None:  # runs right after the watchdog's timer
            seen.append(watchdog.expired)
            watchdog.limit(10)

        def fire_then_move() -> None:  # the timer, then a callback in the same turn
            watchdog._fire()
            late_callback()

        with pytest.raises(TimeoutError), watchdog.limit(0.01):
            # The loop gives no order to two timers due at once (uvloop rounds each to
            # the millisecond from when it was scheduled): the callback is made to
            # follow the timer's own.
            assert watchdog._handle is not None
            watchdog._handle.cancel()
            watchdog._handle = loop.call_at(watchdog._when, fire_then_move)
            await asyncio.sleep(10)
        return seen == [True]

    assert event_loop.run(main())
