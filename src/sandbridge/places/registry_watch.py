"""Tells a reader of the registry when to read it again, instead of a timer.

``serve-stdio`` (its app list) and the dashboard (its tables) used to read every session
record twice a second for as long as they ran: CPU on an idle machine, and half a second
late. :class:`RegistryWatch` watches with inotify (``asyncinotify``) the directories
where a change shows (``registry.py``): the runtime base (a state root made or removed),
each state root (its ``sessions`` or ``remotes`` dir), those dirs (a session dir renamed
in or removed) and each entry dir (its record renamed in; the dir's own times, which a
session touches when its terminal or egress requests change: ``SessionEntry.touch``).
:meth:`RegistryWatch.changed` returns when one of them changed.

A sandbox churning registrations makes a burst of events: a burst is one read, then at
most one read per :data:`MIN_READ_GAP`, however many events come. The watches are
brought up to date before each return, so a dir made before a read is watched from it
on, and one made after it shows as an event in its parent.

Without inotify (no instance left: ``fs.inotify.max_user_instances``; the watch limit
reached: ``max_user_watches``; a kernel without it) it says so in one log line and falls
back to reading every :data:`FALLBACK_POLL_SECONDS`.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import ClassVar

from asyncinotify import Event, Inotify, Mask

from sandbridge import log
from sandbridge.aio.tasks import TaskSet
from sandbridge.places.registry import RECORD, SESSIONS, state_roots
from sandbridge.places.remotes import RECORD as REMOTE_RECORD
from sandbridge.protocol.contract import STATE_PREFIX, runtime_base

# After a read, the next is at most this soon: a burst of registrations (a sandbox
# registering and closing ports as fast as it can) costs four reads a second, not one
# per event; a single change is still read at once.
MIN_READ_GAP = 0.25
# Without inotify, the registry is read this often: slow enough to cost nothing on an
# idle machine, soon enough that an app registered shows within a few seconds.
FALLBACK_POLL_SECONDS = 5.0

# A directory entry made, removed or renamed in or out: what every level shows.
_ENTRIES = Mask.CREATE | Mask.DELETE | Mask.MOVED_FROM | Mask.MOVED_TO | Mask.ONLYDIR
# An entry's own dir: also its times (``SessionEntry.touch``: a change beyond its record).
_ENTRY_DIR = _ENTRIES | Mask.ATTRIB
# A watch that cannot be added for these reasons is not a failure of inotify: the dir
# went away (or was never a dir of ours) between the listing and the watch.
_GONE = {errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ELOOP}
# The limit behind an error: the owner may raise it (or close what holds it).
_LIMITS = {
    errno.EMFILE: "fs.inotify.max_user_instances",
    errno.ENOSPC: "fs.inotify.max_user_watches",
}


class RegistryWatch:
    """Use as ``async with RegistryWatch() as watch``, then ``await watch.changed()``
    before each read. ``places``: which dirs of each state root to watch (``sessions``;
    the dashboard adds ``remotes``, its far machines)."""

    # Whether a watch of this process fell back to polling (said once, then debug).
    fell_back: ClassVar[bool] = False

    def __init__(
        self,
        places: tuple[str, ...] = (SESSIONS,),
        min_gap: float = MIN_READ_GAP,
        fallback: float = FALLBACK_POLL_SECONDS,
    ) -> None:
        self._places = places
        self._min_gap = min_gap
        self._fallback = fallback
        # Watching while set; None once fallen back to polling (``_instance`` is still
        # closed at the end: its reader may be waiting on it when it falls back).
        self._inotify: Inotify | None = None
        self._instance: Inotify | None = None
        self._tasks = TaskSet()
        self._dirty = asyncio.Event()
        self._last = 0.0
        # The kind of each watched dir by its watch descriptor: what an event there means.
        self._kinds: dict[int, str] = {}
        prefix = f"{STATE_PREFIX}{os.getuid()}"
        # Which names in a dir of each kind are a change.
        self._names: dict[str, Callable[[str], bool]] = {
            # This user's state root or a fallback of it (not uid 10's, for uid 1).
            "base": lambda name: name == prefix or name.startswith(f"{prefix}."),
            "root": lambda name: name in places,
            # Not ``.new-*``: a session dir being made, renamed in when done.
            "place": lambda name: not name.startswith("."),
            # Only the record: the other files (the control socket, logs, terminals.json,
            # rewritten after every control op) hold nothing the readers read from the
            # registry, or are told by the dir's times.
            "entry": lambda name: name in (RECORD, REMOTE_RECORD),
        }
        # Times changed() returned: the reads it let happen (tests count them).
        self.reads = 0

    @property
    def watching(self) -> bool:
        """True while inotify tells of changes; False once it fell back to polling."""
        return self._inotify is not None

    async def __aenter__(self) -> RegistryWatch:
        try:
            self._inotify = self._instance = Inotify()
        except OSError as exc:
            self._fall_back(f"no inotify instance: {exc.strerror or exc}", exc.errno)
        else:
            self._tasks.spawn(self._consume(self._inotify))
            self._resync()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self._tasks.close()
        if self._instance is not None:
            self._instance.close()
        self._inotify = self._instance = None

    async def changed(self) -> None:
        """Return when the registry may have changed since the last return (without
        inotify: after :data:`FALLBACK_POLL_SECONDS`), at most once per ``min_gap``."""
        loop = asyncio.get_running_loop()
        if self._inotify is None:
            await asyncio.sleep(self._fallback)
        else:
            await self._dirty.wait()
            # A rate limit, not a wait for something: the events that come meanwhile
            # are the same burst, read once after it.
            await asyncio.sleep(max(0.0, self._last + self._min_gap - loop.time()))
            self._dirty.clear()
            self._resync()
        self._last = loop.time()
        self.reads += 1

    async def _consume(self, inotify: Inotify) -> None:
        async for event in inotify:
            if self._matters(event):
                self._dirty.set()

    def _matters(self, event: Event) -> bool:
        if Mask.Q_OVERFLOW in event.mask:  # events were lost: anything may have changed
            return True
        watch = event.watch
        kind = None if watch is None else self._kinds.get(watch.wd)
        if kind is None or Mask.IGNORED in event.mask:
            return False
        if event.name is None:  # the dir itself: only an entry dir's times count
            return kind == "entry" and Mask.ATTRIB in event.mask
        return self._names[kind](event.name.name)

    def _resync(self) -> None:
        """Watch every dir where a change would show, as they are now."""
        dirs: list[tuple[Path, str]] = [(runtime_base(), "base")]
        for top in state_roots():
            dirs.append((top, "root"))
            for place in self._places:
                dirs.append((top / place, "place"))
                try:
                    entries = [e for e in (top / place).iterdir() if not e.name.startswith(".")]
                except OSError:
                    continue
                dirs += [(entry, "entry") for entry in entries]
        for path, kind in dirs:
            if self._inotify is None:
                return
            try:
                watch = self._inotify.add_watch(path, _ENTRY_DIR if kind == "entry" else _ENTRIES)
            except OSError as exc:
                if exc.errno not in _GONE:  # ENOSPC: the user's watch limit is reached
                    self._fall_back(f"cannot watch {path}: {exc.strerror or exc}", exc.errno)
                continue
            self._kinds[watch.wd] = kind

    def _fall_back(self, reason: str, error: int | None) -> None:
        """Poll from now on, said once per process (with the limit to raise, when one
        was hit): a dashboard makes a watch each time a tab opens after none was."""
        limit = _LIMITS.get(error or 0)
        (log.debug if RegistryWatch.fell_back else log.warning)(
            "registry.watch_unavailable",
            reason=reason if limit is None else f"{reason} (sysctl {limit})",
            poll_seconds=self._fallback,
        )
        RegistryWatch.fell_back = True
        self._inotify = None
        self._dirty.set()
