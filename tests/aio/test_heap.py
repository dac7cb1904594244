"""The heap setting of bulk-copying processes (aio/heap.py), measured in fresh processes:
the page faults of making and freeing a chunk again and again."""

from __future__ import annotations

import subprocess
import sys

# A process that makes eight 256 KiB reads, frees them, and does it again 100 times (a
# window of a bulk transfer in flight, then credited), and prints the minor page faults
# that took.
_CHURN = """
import resource, sys
if sys.argv[1] == "kept":
    from sandbridge.aio.heap import keep_freed_heap
    assert keep_freed_heap()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(100):
    window = [b"x" * (256 * 1024) for _ in range(8)]
    del window
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _CHURN, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


def test_freed_chunks_are_reused_without_page_faults() -> None:
    default, kept = _faults("default"), _faults("kept")
    # By default the freed window goes back to the kernel and is taken again page by
    # page (hundreds of faults a round); kept, the first round's pages serve all the others.
    assert default > 100 * 32
    assert kept < default // 10
