"""The registry watch: real inotify on a real registry (``XDG_RUNTIME_DIR`` a test dir).

The watches here poll only once an hour: a return of :meth:`RegistryWatch.changed` within
the test's time can only be inotify's."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from sandbridge.places.registry import AppRecord, SessionEntry, list_sessions
from sandbridge.places.registry_watch import MIN_READ_GAP, RegistryWatch
from sandbridge.places.remotes import REMOTES

HOUR = 3600.0
# Time for one change to be seen: generous, the machine is shared; never waited out
# when the watch works.
SEEN_WITHIN = 20.0


def _app(port: int) -> AppRecord:
    return AppRecord(port, 40000 + port, "/", f"http://127.0.0.1:{40000 + port}/", False)


def _watched(change: object, places: tuple[str, ...] = ("sessions",)) -> bool:
    """Run ``change`` (a callable) under a fresh watch; True if the watch saw it."""

    async def main() -> bool:
        async with RegistryWatch(places, fallback=HOUR) as watch:
            assert watch.watching
            change()  # type: ignore[operator]
            try:
                async with asyncio.timeout(SEEN_WITHIN):
                    await watch.changed()
            except TimeoutError:
                return False
            return True

    return asyncio.run(main())


def test_the_first_session_of_a_user_is_seen_though_no_state_dir_existed(xdg: Path) -> None:
    entries: list[SessionEntry] = []
    assert _watched(lambda: entries.append(SessionEntry.create("web", xdg)))
    assert [record.id for record in list_sessions()] == ["web"]
    entries[0].remove()


def test_a_record_renamed_in_is_seen(xdg: Path) -> None:
    entry = SessionEntry.create("web", xdg)
    try:
        assert _watched(lambda: entry.set_apps([_app(8000)]))
        [record] = list_sessions()
        assert record.apps == [_app(8000)]
    finally:
        entry.remove()


def test_a_session_dir_removed_is_seen(xdg: Path) -> None:
    keep = SessionEntry.create("keep", xdg)  # the state dirs stay: only the session goes
    entry = SessionEntry.create("web", xdg)
    try:
        assert _watched(entry.remove)
        assert [record.id for record in list_sessions()] == ["keep"]
    finally:
        keep.remove()


def test_a_session_touching_its_dir_is_seen(xdg: Path) -> None:
    """A terminal or egress request changes nothing in the record: the session touches
    its dir (``SessionEntry.touch``), and the readers read again."""
    entry = SessionEntry.create("web", xdg)
    try:
        assert _watched(entry.touch)
    finally:
        entry.remove()


def test_a_far_machine_record_is_seen_by_a_watch_of_remotes(xdg: Path) -> None:
    entry = SessionEntry.create("web", xdg)  # the state root exists
    machine = entry.path.parent.parent / REMOTES / "box"
    try:
        assert _watched(lambda: machine.mkdir(parents=True), ("sessions", REMOTES))
    finally:
        entry.remove()
        machine.rmdir()


def test_a_burst_of_200_registrations_is_a_bounded_number_of_reads(xdg: Path) -> None:
    """200 sessions made and given an app as fast as this process can: the reader reads
    once per burst, then at most once per MIN_READ_GAP, and sees all 200 at the end."""
    entries: list[SessionEntry] = []
    done = threading.Event()

    def burst() -> None:
        for number in range(200):
            entry = SessionEntry.create(f"s{number}", xdg)
            entries.append(entry)
            entry.set_apps([_app(number + 1)])
        done.set()

    async def main() -> tuple[int, float]:
        async with RegistryWatch(fallback=HOUR) as watch:
            started = time.monotonic()
            producer = asyncio.create_task(asyncio.to_thread(burst))
            seen = 0
            while seen < 200:
                async with asyncio.timeout(SEEN_WITHIN):
                    await watch.changed()
                seen = sum(len(record.apps) for record in list_sessions())
            await producer
            return watch.reads, time.monotonic() - started

    try:
        reads, elapsed = asyncio.run(main())
    finally:
        for entry in entries:
            entry.remove()
    assert done.is_set()
    # 400 renames and 200 dirs made: a read per event would be 600 and more.
    assert reads <= elapsed / MIN_READ_GAP + 2, (reads, elapsed)
    assert reads < 100, (reads, elapsed)
