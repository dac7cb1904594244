"""``sandbridge run``'s thin client: with a daemon running, the same run as the full
command's (status, output, signals, messages), from a process that never loads the
event loop; without one, the full command, unchanged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from sandbridge.places import placeholder_lock
from tests.conftest import Process, run_argv, start_daemon
from tests.support.command_in_process import sandbridge

# A command that says it runs, then waits to be ended.
WAITING = ("sh", "-c", "echo READY; exec sleep 600")


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def sessions() -> list[dict[str, object]]:
    """The owner's ``sandbridge ls --json``, in this process
    (tests/support/command_in_process.py)."""
    listed: list[dict[str, object]] = json.loads(sandbridge("ls", "--json").stdout)
    return listed


def maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_status_and_output_pass_through_the_thin_client(daemon: Process, tmp_path: Path) -> None:
    result = run(run_argv(tmp_path, "sh", "-c", "echo out; echo err >&2; exit 7"))
    assert result.returncode == 7
    assert result.stdout == "out\n"
    assert "err\n" in result.stderr
    assert result.stderr.startswith("sandbridge: policy files read: ")
    daemon.wait_line("sandbridge: daemon.run_built ", "stderr")
    session = result.stderr.split("sandbridge: session ")[1].split()[0]
    assert f"session='{session}'" in daemon.wait_line("sandbridge: daemon.session ", "stderr")


def test_the_command_starts_once_the_daemon_serves_the_session(
    daemon: Process, tmp_path: Path
) -> None:
    # The thin client starts the sandbox while the daemon binds the session's sockets;
    # the command waits for them (the entry's start gate).
    check = "test -S /run/ags-webview-relay/relay.sock && echo served"
    result = run(run_argv(tmp_path, "sh", "-c", check))
    assert (result.returncode, result.stdout) == (0, "served\n"), result.stderr
    daemon.wait_line("sandbridge: daemon.run_built ", "stderr")


def test_the_thin_client_never_loads_the_event_loop(daemon: Process, tmp_path: Path) -> None:
    # The real check: the event loop's C module is mapped in a process that imported
    # asyncio. The full command (--no-daemon) maps it; the thin client must not.
    thin = Process(run_argv(tmp_path, *WAITING))
    full = Process(run_argv(tmp_path, *WAITING, options=("--no-daemon",)))
    try:
        thin.wait_line("READY")
        full.wait_line("READY")
        assert "_asyncio" in maps(full.popen.pid)
        assert "_asyncio" not in maps(thin.popen.pid)
        assert "_ssl" not in maps(thin.popen.pid)
    finally:
        assert thin.stop() == 128 + signal.SIGTERM
        full.stop()


def test_the_session_is_the_thin_clients_own(daemon: Process, xdg: Path, tmp_path: Path) -> None:
    client = Process(run_argv(tmp_path, *WAITING))
    try:
        client.wait_line("READY")
        (listed,) = sessions()
        assert listed["pid"] == client.popen.pid
        assert (xdg / f"ags-webview-relay-{client.popen.pid}").is_dir()
    finally:
        client.stop()
    assert sessions() == []
    assert not list(xdg.glob("ags-webview-relay-*")), "the builder removed the runtime dir"


def test_a_run_started_as_the_last_one_exits_is_protected_and_no_placeholder_stays(
    daemon: Process, tmp_path: Path
) -> None:
    # The client exits once its command's status is known; its builder removes the
    # placeholders after that, holding from before its answer the lock a run's start
    # takes to make its own (places/placeholder_lock.py): each run started straight after
    # the last has them, read-only, and none stays once the last removal is done.
    work = tmp_path / "work"
    work.mkdir()
    check = "test -d .vscode && ! mkdir .vscode/x 2>/dev/null && echo protected"
    for _ in range(3):
        result = run(run_argv(work, "sh", "-c", check))
        assert (result.returncode, result.stdout) == (0, "protected\n"), result.stderr
    with placeholder_lock.held() as held:  # taken once the last run's removal is done
        assert held
        assert sorted(os.listdir(work)) == []


def test_the_ends_warnings_and_status_arrive_and_no_session_dir_outlives_the_client(
    daemon: Process, xdg: Path, tmp_path: Path
) -> None:
    # The client tells its builder the status as the sandbox ends: the builder checks
    # what the sandbox changed while the daemon closes the session, and removes the
    # session's dirs once the client says the daemon has closed it, then answers: none
    # is left when the client has exited. (Whether the checks overlap the daemon's close
    # is timing, measured in docs/benchmarks.md, not asserted here.)
    work = tmp_path / "work"
    work.mkdir()
    result = run(run_argv(work, "sh", "-c", "mkdir -p sub/.sandbridge; exit 3"))
    assert result.returncode == 3, result.stderr
    assert (
        "sandbridge: WARNING: the sandbox created a sandbridge policy directory at "
        f"{work / 'sub' / '.sandbridge'}: a sandbridge run there obeys it"
    ) in result.stderr
    assert sessions() == []
    assert not list(xdg.glob("ags-webview-relay-*"))
    daemon.wait_line("sandbridge: daemon.session_end ", "stderr")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_ends_the_sandbox_with_128_plus_its_number(
    daemon: Process, tmp_path: Path, signum: signal.Signals
) -> None:
    marker = tmp_path / "still-running"
    client = Process(run_argv(tmp_path, "sh", "-c", f"echo READY; sleep 600; touch {marker}"))
    client.wait_line("READY")
    assert client.stop(signum) == 128 + signum
    assert sessions() == []
    assert not marker.exists()


def test_an_option_error_says_what_the_full_command_says(daemon: Process, tmp_path: Path) -> None:
    thin = run(run_argv(tmp_path, "true", options=("--net", "everything")))
    full = run(run_argv(tmp_path, "true", options=("--net", "everything", "--no-daemon")))
    assert thin.returncode == full.returncode == 2
    assert thin.stderr == full.stderr
    assert "argument --net: invalid choice: 'everything'" in thin.stderr
    daemon.wait_line("sandbridge: daemon.run_built ", "stderr")


def test_a_refusal_says_what_the_full_command_says(daemon: Process, tmp_path: Path) -> None:
    thin = run(run_argv(tmp_path / "missing", "true"))
    full = run(run_argv(tmp_path / "missing", "true", options=("--no-daemon",)))
    assert thin.returncode == full.returncode == 2
    assert (
        thin.stderr
        == full.stderr
        == f"sandbridge: --workdir {tmp_path / 'missing'}: not a directory\n"
    )


def test_without_a_daemon_the_full_command_runs(xdg: Path, tmp_path: Path) -> None:
    result = run(run_argv(tmp_path, "sh", "-c", "echo out; exit 5"))
    assert (result.returncode, result.stdout) == (5, "out\n")
    assert os.listdir(xdg) == []


def test_a_daemon_killed_mid_session_serves_it_again_when_back(xdg: Path, tmp_path: Path) -> None:
    daemon = start_daemon()
    client = Process(run_argv(tmp_path, *WAITING))
    try:
        client.wait_line("READY")
        daemon.stop(signal.SIGKILL)
        client.wait_line("sandbridge: the daemon stopped serving this session (", "stderr")
        daemon = start_daemon()
        client.wait_line("sandbridge: the daemon serves this session again", "stderr")
    finally:
        assert client.stop() == 128 + signal.SIGTERM
        daemon.stop()
