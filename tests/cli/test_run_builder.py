"""The daemon's run builder builds a thin client's run as the client's own process
would: in its directory, with its environment, printing on its terminal."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import REPO, SANDBRIDGE, Process


def run_in(directory: Path, *words: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SANDBRIDGE, "run", "--ro-bind", str(REPO), *words],
        cwd=directory,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_run_is_built_in_the_clients_directory_and_environment(
    daemon: Process, tmp_path: Path
) -> None:
    # Neither is the daemon's: its directory is the test's, its environment has no
    # CLIENT_ONLY; --env NAME passes the client's value, the workdir is the client's.
    work = tmp_path / "work"
    work.mkdir()
    result = run_in(
        work, "--env", "CLIENT_ONLY", "--", "sh", "-c", 'pwd; echo "$CLIENT_ONLY"',
        CLIENT_ONLY="the client's",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{work}\nthe client's\n"
    daemon.wait_line("sandbridge: daemon.run_built ", "stderr")


def test_help_is_printed_on_the_clients_output(daemon: Process, tmp_path: Path) -> None:
    thin = run_in(tmp_path, "--help")
    full = run_in(tmp_path, "--help", "--no-daemon")
    assert thin.returncode == full.returncode == 0
    assert thin.stdout == full.stdout
    assert thin.stdout.startswith("usage: sandbridge run ")
    daemon.wait_line("sandbridge: daemon.run_built ", "stderr")
