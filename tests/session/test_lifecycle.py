"""The owner's session ops on the control socket (``session/lifecycle.py``), against a
real ``sandbridge run`` session: what it runs, closing an app, the egress summary, stop."""

from __future__ import annotations

import select
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.exceptions import ControlError
from sandbridge.places.registry import list_sessions
from sandbridge.terminals.control import call
from tests.conftest import ECHO_APP, PYTHON, Process, port_is_open, processes_with, run_argv

MARKER = "lifecycle-ops-marker"


def _session(backend: str, workdir: Path, *options: str) -> Process:
    process = Process(
        run_argv(
            workdir, PYTHON, ECHO_APP, "--register", "4173", "--daemon", MARKER,
            options=("--backend", backend, "--name", "web", *options),
        )
    )  # fmt: skip
    process.wait_line("READY")
    return process


@pytest.fixture
def web(tmp_path: Path, served: Process | None) -> Iterator[Process]:
    """A session served by its own process, and one served by the daemon."""
    process = _session("bwrap", tmp_path)
    yield process
    process.stop()


def test_session_info_names_the_command_and_network_mode(web: Process) -> None:
    info = call("web", {"op": "session_info"})
    assert info["command"] == [PYTHON, ECHO_APP, "--register", "4173", "--daemon", MARKER]
    assert info["network"] == "allow"


def test_the_owner_closes_an_app(web: Process) -> None:
    (record,) = list_sessions()
    (app,) = record.apps
    assert port_is_open(app.host_port)
    assert call("web", {"op": "app_close", "host_port": app.host_port}) == {
        "ok": True, "closed": app.host_port,
    }  # fmt: skip
    assert not port_is_open(app.host_port)
    assert list_sessions()[0].apps == []


@pytest.mark.parametrize(
    ("port", "code"), [(1, "unknown_app"), ("80", "malformed"), (None, "malformed")]
)
def test_closing_an_app_that_is_not_there_is_refused(web: Process, port: object, code: str) -> None:
    with pytest.raises(ControlError) as refused:
        call("web", {"op": "app_close", "host_port": port})
    assert refused.value.code == code


def test_the_egress_summary_of_an_allow_session_starts_empty(web: Process) -> None:
    assert call("web", {"op": "egress_summary"}) == {
        "ok": True, "mode": "allow", "destinations": [],
    }  # fmt: skip


def test_a_session_without_a_gate_has_an_empty_summary(tmp_path: Path, xdg: Path) -> None:
    process = _session("bwrap", tmp_path, "--net", "none")
    try:
        answer = call("web", {"op": "egress_summary"})
        assert answer == {"ok": True, "mode": "none", "destinations": []}
        with pytest.raises(ControlError) as refused:
            call("web", {"op": "egress_pending"})
        assert refused.value.code == "no_egress"
    finally:
        process.stop()


def test_stop_ends_the_session_and_its_sandbox_as_sigterm_does(
    backend: str, tmp_path: Path, served: Process | None
) -> None:
    """Served by the daemon, the ``stop`` reaches the ``run`` that holds the sandbox as
    the daemon's ``stop`` event."""
    process = _session(backend, tmp_path)
    sandboxed = processes_with(MARKER)
    assert sandboxed
    assert call("web", {"op": "stop"}) == {"ok": True, "stopping": True}
    assert process.popen.wait(30) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in sandboxed):
        assert time.monotonic() < deadline, "the sandbox outlived its session"
        select.select([], [], [], 0.05)
    assert list_sessions() == []
