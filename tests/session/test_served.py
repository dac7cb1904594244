"""``sandbridge run`` with the user's daemon: used when it runs, never when told not to."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import Process, run_argv


def test_run_is_served_by_the_daemon_when_one_runs(daemon: Process, tmp_path: Path) -> None:
    result = subprocess.run(
        run_argv(tmp_path, "true"), capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0
    line = daemon.wait_line("sandbridge: daemon.session ", "stderr")
    session = result.stderr.split("sandbridge: session ")[1].split()[0]
    assert f"session='{session}'" in line


def test_no_daemon_serves_the_session_itself(daemon: Process, tmp_path: Path) -> None:
    result = subprocess.run(
        run_argv(tmp_path, "true", options=("--no-daemon",)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    daemon.stop()
    assert "daemon.session" not in daemon.drain("stderr")


def test_run_without_a_daemon_leaves_no_daemon_state(xdg: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        run_argv(tmp_path, "true"), capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0
    assert os.listdir(xdg) == []
