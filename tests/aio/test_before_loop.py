"""Set-up without an event loop: the exit status of a child as a shell gives it."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from sandbridge.aio.before_loop import reap


@pytest.mark.parametrize(
    ("script", "status"),
    [("exit 0", 0), ("exit 7", 7), ("kill -TERM $$", 128 + signal.SIGTERM)],
)
def test_reap_gives_the_status_as_a_shell_does(script: str, status: int) -> None:
    pid = os.posix_spawnp("sh", ["sh", "-c", script], os.environ)
    assert reap(pid) == status


def test_reap_of_a_child_that_ended_before_the_wait() -> None:
    child = subprocess.Popen(["true"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, not yet reaped
    assert reap(child.pid) == 0
    child.returncode = 0  # reaped here: Popen must not wait for it again
