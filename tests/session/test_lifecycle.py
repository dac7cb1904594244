"""The owner's session ops on the control socket (``session/lifecycle.py``), against a
real ``sandbridge run`` session: what it runs, closing an app, the egress summary, stop."""

from __future__ import annotations

import select
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from asyncinotify import Inotify, Mask

from sandbridge.exceptions import ControlError
from sandbridge.places.registry import list_sessions, session_path
from sandbridge.terminals import approval, keys
from sandbridge.terminals.control import call
from tests.conftest import (
    ECHO_APP,
    PYTHON,
    Process,
    port_is_open,
    processes_with,
    run_argv,
    start_daemon,
)

MARKER = "lifecycle-ops-marker"
# The daemon of the module's shared session (read_web_xdg): alive while other tests look
# for theirs by MARKER.
SHARED_MARKER = "lifecycle-read-marker"


def _session(backend: str, workdir: Path, *options: str, marker: str = MARKER) -> Process:
    process = Process(
        run_argv(
            workdir, PYTHON, ECHO_APP, "--register", "4173", "--daemon", marker,
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


@pytest.fixture(scope="module", params=["standalone", "daemon"])
def read_web_xdg(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The session of :func:`web` (each mode) for the module's tests that only read from
    it, one per module: its XDG_RUNTIME_DIR (:func:`read_web` points a test at it)."""
    base = tmp_path_factory.mktemp("web")
    xdg = base / "xdg"
    xdg.mkdir(mode=0o700)
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
        daemon = start_daemon() if request.param == "daemon" else None
        try:
            process = _session("bwrap", base, marker=SHARED_MARKER)
        except BaseException:
            if daemon is not None:
                daemon.stop()
            raise
    try:
        yield xdg
    finally:
        process.stop()
        if daemon is not None:
            daemon.stop()


@pytest.fixture
def read_web(read_web_xdg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This test asks the shared session (its owner's XDG_RUNTIME_DIR)."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(read_web_xdg))


@pytest.mark.usefixtures("read_web")
def test_session_info_names_the_command_and_network_mode() -> None:
    info = call("web", {"op": "session_info"})
    assert info["command"] == [PYTHON, ECHO_APP, "--register", "4173", "--daemon", SHARED_MARKER]
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
@pytest.mark.usefixtures("read_web")
def test_closing_an_app_that_is_not_there_is_refused(port: object, code: str) -> None:
    with pytest.raises(ControlError) as refused:
        call("web", {"op": "app_close", "host_port": port})
    assert refused.value.code == code


@pytest.mark.usefixtures("read_web")
def test_the_egress_summary_of_an_allow_session_starts_empty() -> None:
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
    # Its terminal says why it ended (served by the daemon: the thin client says it).
    process.wait_line("sandbridge: session web was stopped by its owner", "stderr")
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in sandboxed):
        assert time.monotonic() < deadline, "the sandbox outlived its session"
        select.select([], [], [], 0.05)
    assert list_sessions() == []


def _times_told_before_a_sentinel(path: Path, inotify: Inotify) -> int:
    """The changes of its own times ``path`` told (``SessionEntry.touch``) since the last
    call: a sentinel file made in it now comes after them (inotify keeps the order)."""
    sentinel = path / f"sentinel-{time.monotonic_ns()}"
    sentinel.touch()
    sentinel.unlink()
    told = 0
    for event in inotify:
        if event.name is not None and event.name.name == sentinel.name:
            return told
        told += event.name is None and Mask.ATTRIB in event.mask
    raise AssertionError("the sentinel was not seen")


def test_the_registry_is_told_of_terminal_requests_and_not_of_reads(
    tmp_path: Path, xdg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker tells of a change after every control op, reads too: the session's dir
    is touched (what serve-stdio and the dashboard watch) only when its requests
    changed, or each of their reads would make them read again, for good."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    web = _session("bwrap", tmp_path)
    try:
        path = session_path("web")
        with Inotify(sync_timeout=20) as inotify:
            inotify.add_watch(path, Mask.ATTRIB | Mask.CREATE)
            for op in ("list", "session_info", "egress_summary", "egress_pending", "info"):
                call("web", {"op": op})
            assert _times_told_before_a_sentinel(path, inotify) == 0
            instance = call("web", {"op": "info"})["instance"]
            document = approval.sign_request(keys.owner_key(), "web", instance, "look", time.time())
            call("web", {"op": "request", "request": document})
            assert _times_told_before_a_sentinel(path, inotify) == 1
    finally:
        web.stop()
