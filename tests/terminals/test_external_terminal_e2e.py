"""Owner-approved terminals into a sandbox another runtime starts: a real ``sandbridge
host`` (standalone, or served by the daemon), ``sandbridge shim --terminals`` in its own
PID and UTS namespaces standing in for the container, the real CLI, a real PTY."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.terminals.control import call
from sandbridge.terminals.pty_worker import descendants
from tests.conftest import SANDBRIDGE, Process, processes_with, start_daemon
from tests.terminals.harness import (
    PROMPT,
    WORKER_MARKER,
    Records,
    attach_child,
    finish,
    with_end,
)

CONTAINER_HOSTNAME = "sb-container"


class ExternalSession:
    """``sandbridge host`` on a runtime dir and a "container" running the shim on it."""

    def __init__(self, tmp_path: Path, shim_options: tuple[str, ...] = ("--terminals",)) -> None:
        self.env = dict(os.environ)
        self.runtime_dir = tmp_path / "rt"
        self.runtime_dir.mkdir(mode=0o700)
        self.host = Process(
            [*SANDBRIDGE, "host", "--runtime-dir", str(self.runtime_dir), "--name", "box", "-v"]
        )
        self.host.wait_line("sandbridge: serving registrations", "stderr")
        shim = [*SANDBRIDGE, "shim", "--socket", str(self.runtime_dir / "upstream.sock")]
        # Its own PID namespace (whose end kills everything in it) and host name: the
        # shell must be the container's, not the host's.
        container = [
            "unshare", "--pid", "--uts", "--fork", "--kill-child", "--mount-proc",
            "sh", "-c", f'hostname {CONTAINER_HOSTNAME} && exec "$@"', "container",
        ]  # fmt: skip
        self.container = Process([*container, *shim, *shim_options])
        self.container.wait_line("sandbridge: shim listening", "stderr")
        if shim_options:
            self.container.wait_line("sandbridge: terminal workers start on", "stderr")

    def cli(self, *args: str, check: bool = True) -> tuple[int, str, str]:
        result = subprocess.run(
            [*SANDBRIDGE, *args], capture_output=True, text=True, timeout=60, check=False
        )
        if check:
            assert result.returncode == 0, result.stderr
        return result.returncode, result.stdout, result.stderr

    def approved(self) -> str:
        _, out, _ = self.cli("terminal", "request", "box", "--no-wait", "--reason", "t")
        request_id = out.strip()
        self.cli("terminal", "approve", request_id, "--duration", "60")
        return request_id

    def in_container(self, marker: str) -> list[int]:
        """The container's processes carrying ``marker``."""
        mine = set(descendants(self.container.popen.pid))
        return [pid for pid in processes_with(marker) if pid in mine]

    def wait_for(self, marker: str, present: bool = True, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while bool(self.in_container(marker)) is not present:
            assert time.monotonic() < deadline, f"{marker!r} present={not present} after {timeout}s"
            select.select([], [], [], 0.05)

    def audit(self, request_id: str) -> Records:
        records = json.loads(self.cli("terminal", "audit", "--json")[1])
        return [r for r in records if r.get("request") == request_id]

    def stop(self) -> None:
        # unshare --fork ignores SIGTERM; its death takes the child (--kill-child), and the
        # child's (PID 1's) the whole namespace.
        self.container.stop(signal.SIGKILL)
        self.host.stop()


@pytest.fixture
def private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's own XDG dirs, for the host, the daemon and every CLI command."""
    for name in ("XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
        path = tmp_path / name.lower()
        path.mkdir(mode=0o700)
        monkeypatch.setenv(name, str(path))


@pytest.fixture(params=["standalone", "daemon"])
def mode(request: pytest.FixtureRequest, private_state: None) -> Iterator[Process | None]:
    if request.param == "standalone":
        yield None
        return
    daemon = start_daemon()
    yield daemon
    daemon.stop()


def test_a_terminal_opens_in_the_container_and_revocation_ends_it(
    mode: Process | None, tmp_path: Path
) -> None:
    session = ExternalSession(tmp_path)
    try:
        if mode is not None:
            mode.wait_line("sandbridge: daemon.session ", "stderr")
        request_id = session.approved()
        child = attach_child(session.env, request_id)
        child.expect(PROMPT)
        child.sendline("echo HOST-$(hostname)-$((6*7))")
        child.expect(f"HOST-{CONTAINER_HOSTNAME}-42")
        child.sendline("sleep 1003")
        child.expect("sleep 1003\r\n")
        session.wait_for("sleep 1003")
        assert session.in_container(WORKER_MARKER), "the worker runs below the container's shim"
        session.cli("terminal", "revoke", request_id)
        status, output = finish(child)
        assert "terminal ended: revoked" in output
        assert status == 3
        session.wait_for("sleep 1003", present=False)
        session.wait_for(WORKER_MARKER, present=False)
        events = [(r["event"], r.get("end")) for r in with_end(lambda: session.audit(request_id))]
        assert ("admission", None) in events and ("end", "revoked") in events
        assert session.container.popen.poll() is None, "the container outlives the terminal"
    finally:
        session.stop()


def test_a_shim_without_terminals_is_refused_before_the_approval_is_spent(
    private_state: None, tmp_path: Path
) -> None:
    session = ExternalSession(tmp_path, shim_options=())
    try:
        request_id = session.approved()
        status, _, err = session.cli("terminal", "attach", request_id, check=False)
        assert status == 2
        assert "no terminal.sock in the runtime dir: run sandbridge shim --terminals" in err
        _, listing, _ = session.cli("terminal", "list", "--json")
        assert [r["state"] for r in json.loads(listing)] == ["approved"]
    finally:
        session.stop()


def test_a_pending_request_survives_a_daemon_restart_then_attaches(
    private_state: None, tmp_path: Path
) -> None:
    daemon = start_daemon()
    session = ExternalSession(tmp_path)
    try:
        daemon.wait_line("sandbridge: daemon.session ", "stderr")
        _, out, _ = session.cli("terminal", "request", "box", "--no-wait", "--reason", "t")
        request_id = out.strip()
        daemon.stop(signal.SIGKILL)
        daemon = start_daemon()
        session.host.wait_line("sandbridge: the daemon serves this session again", "stderr")
        _, listing, _ = session.cli("terminal", "list", "--json")
        assert [(r["id"], r["state"]) for r in json.loads(listing)] == [(request_id, "pending")]
        session.cli("terminal", "approve", request_id, "--duration", "60")
        child = attach_child(session.env, request_id)
        child.expect(PROMPT)
        child.sendline("exit 5")
        assert finish(child)[0] == 5
    finally:
        session.stop()
        daemon.stop()


def test_the_owners_stop_ends_the_host_half_and_leaves_the_container_running(
    mode: Process | None, tmp_path: Path
) -> None:
    """``sandbridge host`` serves a control socket now: its ``stop`` (the dashboard's
    Stop) ends the host half as SIGTERM does; the container is its runtime's to end."""
    session = ExternalSession(tmp_path)
    try:
        if mode is not None:
            mode.wait_line("sandbridge: daemon.session ", "stderr")
        assert call("box", {"op": "stop"}) == {"ok": True, "stopping": True}
        assert session.host.popen.wait(30) == 128 + signal.SIGTERM
        assert session.container.popen.poll() is None, "the container outlives the host half"
    finally:
        session.stop()
