"""The daemon's run builder builds a thin client's run as the client's own process
would: in its directory, with its environment, printing on its terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sandbridge.daemon.builder import package_identity
from sandbridge.protocol import daemon_wire
from tests.conftest import REPO, SANDBRIDGE, Process
from tests.daemon.test_server import ask


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


def test_a_directory_swapped_after_the_client_named_it_is_left_to_the_full_command(
    daemon: Process, xdg: Path, tmp_path: Path
) -> None:
    # The client is in work; a process that may write its parent (another session's
    # sandbox) renames it and puts a link to elsewhere in its place before the builder
    # goes there: the builder would have built a run of elsewhere.
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    named = [work.stat().st_dev, work.stat().st_ino]
    work.rename(tmp_path / "moved")
    work.symlink_to(elsewhere)
    request = daemon_wire.run_request(
        {
            "argv": ["run", "--ro-bind", str(REPO), "--", "true"],
            "cwd": str(work),
            "cwd_id": named,
            "env": dict(os.environ),
            "umask": 0o022,
            "python": daemon_wire.python_identity(sys.executable, sys.prefix),
            "package": package_identity(),
        }
    )
    read, write = os.pipe()
    with os.fdopen(read, "rb") as output:
        try:
            answer = ask(xdg, request, [write, write, write])
        finally:
            os.close(write)
        printed = output.read()
    assert answer == {"fallback": "the full command runs it"}
    assert printed == b""
