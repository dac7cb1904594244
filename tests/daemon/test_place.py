"""One daemon per user: the pid lock, and the private socket."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
from pathlib import Path

from tests.conftest import SANDBRIDGE, Process, start_daemon


def test_second_daemon_refuses_naming_the_first_pid(daemon: Process) -> None:
    second = subprocess.run(
        [*SANDBRIDGE, "daemon"], capture_output=True, text=True, timeout=30, check=False
    )
    assert second.returncode == 2
    assert (
        f"a sandbridge daemon already runs for this user (pid {daemon.popen.pid})" in second.stderr
    )


def test_socket_is_0600_in_a_0700_dir(daemon: Process, xdg: Path) -> None:
    path = xdg / f"sandbridge-{os.getuid()}" / "daemon.sock"
    info = path.lstat()
    assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert stat.S_IMODE(path.parent.lstat().st_mode) == 0o700


def test_daemon_killed_with_sigkill_leaves_a_lock_the_next_one_takes(xdg: Path) -> None:
    first = start_daemon()
    first.stop(signal.SIGKILL)
    second = start_daemon()
    assert second.stop() == 128 + signal.SIGTERM
