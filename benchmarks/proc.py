"""A process's children, as the benchmarks count their CPU time.

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


def parent(pid: int) -> int | None:
    """``pid``'s parent, from its ``stat`` (the fields after the name, which may hold any
    byte but the last ``)``); None once it has ended."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[-1].split()
    except OSError:
        return None
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def _children_by_parent(pid: int) -> list[int]:
    return [
        int(name) for name in os.listdir("/proc") if name.isdigit() and parent(int(name)) == pid
    ]
