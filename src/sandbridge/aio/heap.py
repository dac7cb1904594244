"""The C heap of a process that copies bulk data: freed memory kept for reuse.

A bulk transfer through ``connect`` or ``serve-stdio`` makes and frees a ``bytes`` of up
to a few hundred KiB per read, frame and write. With glibc's default settings the heap
top is given back to the kernel as soon as a little is free there (``brk``), and the
next allocation takes it back, page fault by page fault: a profile of ``serve-stdio``
during a 100 MiB GET had a tenth of its time in page faults and a sixth in the kernel's
page and cgroup accounting around them, and ``connect`` made 800 ``brk`` calls for two
GETs (docs/history/benchmark-rounds.md, "Remote link"). Kept, the same pages serve the next chunk.

What is kept is bounded: at most :data:`KEEP_FREE_BYTES` of free heap is held beyond
what the process uses at its busiest. Elsewhere than glibc (musl) nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt's parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Free heap kept at its top before it is given back: the link's windows in flight (2 MiB
# per stream each way) several times over, and small beside a browser tab.
KEEP_FREE_BYTES = 32 * 1024 * 1024
# Blocks this large and larger are mapped and unmapped on their own (outside the heap,
# so never kept): no single read, frame or write of the data path is this large.
OWN_MAPPING_BYTES = 4 * 1024 * 1024


def keep_freed_heap() -> bool:
    """Have glibc keep freed heap memory for reuse (see above); False where it cannot
    (no glibc, or it refused a setting)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    kept = mallopt(M_TRIM_THRESHOLD, KEEP_FREE_BYTES) == 1
    own = mallopt(M_MMAP_THRESHOLD, OWN_MAPPING_BYTES) == 1
    return bool(kept and own)
