"""benchmarks/proc.py: a process's children, from the kernel's lists or, where a kernel
keeps none, from every process's parent; the two agree on real processes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from benchmarks import proc


def test_the_kernels_lists_and_the_parents_scan_name_the_same_children(tmp_path: Path) -> None:
    # A name that looks like the end of stat's name field and more fields after it.
    odd = tmp_path / "a) S 1 (b"
    shutil.copy("/bin/sleep", odd)
    started = [subprocess.Popen([str(odd), "60"]), subprocess.Popen(["sleep", "60"])]
    try:
        pids = sorted(process.pid for process in started)
        assert proc.LISTS_CHILDREN, "this kernel lists children: the lists are tested here"
        assert sorted(proc.children(os.getpid())) == pids
        assert sorted(proc._children_by_parent(os.getpid())) == pids
        assert proc.parent(started[0].pid) == os.getpid()
    finally:
        for process in started:
            process.kill()
            process.wait()
    assert proc.children(os.getpid()) == []
    assert proc.parent(started[0].pid) is None


def test_a_process_that_ended_has_no_children() -> None:
    ended = subprocess.Popen(["true"])
    ended.wait()
    assert proc.children(ended.pid) == []
    assert proc._children_by_parent(ended.pid) == []
