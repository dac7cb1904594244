"""A process's children and CPU time, as the benchmarks count them (``/proc``).

Each thread's ``/proc/PID/task/TID/children`` lists them in a few reads; a kernel built
without ``CONFIG_PROC_CHILDREN`` has no such file, and there every process's ``stat`` is
read for its parent instead (hundreds of reads, but the same answer): never an empty list
that would leave the children's CPU time out of a figure.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

# Whether this kernel lists children (the file exists for any live process: this one).
LISTS_CHILDREN = Path(f"/proc/self/task/{os.getpid()}/children").exists()


def children(pid: int) -> list[int]:
    """``pid``'s live children; none once it has ended."""
    if not LISTS_CHILDREN:
        return _children_by_parent(pid)
    found: list[int] = []
    with contextlib.suppress(OSError):  # it ended meanwhile
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):  # that thread ended meanwhile
                found += [int(child) for child in (task / "children").read_text().split()]
    return found


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int) -> list[str]:
    """The fields of ``pid``'s ``stat`` after its name (``state`` first), which the name
    cannot shift: it may hold any byte, ``)`` and spaces too, but ends at the last ``)``.
    Raises OSError once ``pid`` has ended."""
    after_name = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[-1]
    return after_name.decode("ascii", "replace").split()


def cpu_seconds(pid: int) -> float:
    """``pid``'s user and system CPU time and its waited-for children's."""
    return sum(int(value) for value in stat_fields(pid)[11:15]) / CLOCK_TICKS


def parent(pid: int) -> int | None:
    """``pid``'s parent; None once it has ended."""
    try:
        fields = stat_fields(pid)
    except OSError:
        return None
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def _children_by_parent(pid: int) -> list[int]:
    return [
        int(name) for name in os.listdir("/proc") if name.isdigit() and parent(int(name)) == pid
    ]
