"""benchmarks/proc.py: a process's children, from the kernel's lists or, where a kernel
keeps none, from every process's parent; the two agree on real processes.

The worker running these tests may have children of its own (a session-wide fixture's
engine, say): the tests look for the processes they started, never for "no other"."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from benchmarks import proc


@contextmanager
def two_children(tmp_path: Path) -> Iterator[set[int]]:
    """Two children of this process, one named to look like the end of ``stat``'s name
    field and more fields after it; killed and reaped at the end."""
    odd = tmp_path / "a) S 1 (b"
    shutil.copy("/bin/sleep", odd)
    started: list[subprocess.Popen[bytes]] = []
    try:
        started.append(subprocess.Popen([str(odd), "60"]))
        started.append(subprocess.Popen(["sleep", "60"]))
        yield {process.pid for process in started}
    finally:
        for process in started:
            process.kill()
            process.wait()


def test_the_kernels_lists_and_the_parents_scan_both_find_the_children_started(
    tmp_path: Path,
) -> None:
    assert proc.LISTS_CHILDREN, "this kernel lists children: the lists are tested here"
    with two_children(tmp_path) as ours:
        assert ours <= set(proc.children(os.getpid()))
        assert ours <= set(proc._children_by_parent(os.getpid()))
        assert {proc.parent(pid) for pid in ours} == {os.getpid()}
        # The odd name shifts no field: each is a sleeping process of this session.
        assert {proc.stat_fields(pid)[0] for pid in ours} <= {"S", "R"}
        assert {int(proc.stat_fields(pid)[3]) for pid in ours} == {os.getsid(0)}
        assert all(proc.cpu_seconds(pid) >= 0 for pid in ours)
    assert not ours & set(proc.children(os.getpid()))
    assert {proc.parent(pid) for pid in ours} == {None}


def test_without_the_kernels_lists_the_parents_are_scanned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proc, "LISTS_CHILDREN", False)
    with two_children(tmp_path) as ours:
        assert ours <= set(proc.children(os.getpid()))
    assert not ours & set(proc.children(os.getpid()))


def test_a_process_that_ended_has_no_children() -> None:
    ended = subprocess.Popen(["true"])
    ended.wait()
    assert proc.children(ended.pid) == []
    assert proc._children_by_parent(ended.pid) == []
