"""``sandbridge run`` with the user's daemon: used when it runs, never when told not to."""

from __future__ import annotations

import contextlib
import http.client
import os
import select
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import (
    SANDBRIDGE,
    Process,
    Relay,
    host_port_of,
    request,
    run_argv,
    start_daemon,
)

SESSION_LINE = "sandbridge: daemon.session "


@dataclass
class Daemon:
    """The daemon of the module's tests that only use one (it serves their sessions and
    refuses nothing): started once, in a runtime base of its own."""

    process: Process
    xdg: Path

    def next_session_line(self, before: int) -> str:
        """The daemon's line for the session after the ``before`` it had announced."""
        return self.process.wait_lines(SESSION_LINE, before + 1, "stderr")[before]

    def sessions(self) -> int:
        return len([line for line in self.process.lines["stderr"] if line.startswith(SESSION_LINE)])


@pytest.fixture(scope="module")
def module_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    xdg = tmp_path_factory.mktemp("daemon") / "xdg"
    xdg.mkdir(mode=0o700)
    process = start_daemon(env={**os.environ, "XDG_RUNTIME_DIR": str(xdg)})
    yield Daemon(process, xdg)
    process.stop()


@pytest.fixture
def shared_daemon(module_daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> Daemon:
    """The module's daemon, its runtime base this test's."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(module_daemon.xdg))
    return module_daemon


def test_run_is_served_by_the_daemon_when_one_runs(shared_daemon: Daemon, tmp_path: Path) -> None:
    before = shared_daemon.sessions()
    result = subprocess.run(
        run_argv(tmp_path, "true"), capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0
    line = shared_daemon.next_session_line(before)
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


def test_host_session_is_served_by_the_daemon(
    shared_daemon: Daemon, runtime_dir: Path, app_port: int
) -> None:
    before = shared_daemon.sessions()
    relay = Relay(runtime_dir)
    try:
        assert request(host_port_of(relay.register(app_port)))[0] == 200
        shared_daemon.next_session_line(before)
    finally:
        relay.stop()


def echo_service() -> tuple[socket.socket, threading.Thread]:
    """A host service on 127.0.0.1 that answers each connection's first bytes."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.sendall(b"echo:" + conn.recv(100))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


def test_host_egress_gate_serves_the_policy_of_a_container_session(
    served: Process | None, runtime_dir: Path
) -> None:
    listener, _ = echo_service()
    service = listener.getsockname()[1]
    shim = [
        *SANDBRIDGE, "shim", "--socket", str(runtime_dir / "upstream.sock"),
        # 127.0.0.2 stands for the container's own loopback (the host service holds .1).
        "--gate-addr", "127.0.0.2", "--gate-port", str(service), "--gate-port", "18081",
    ]  # fmt: skip
    relay = Relay(
        runtime_dir,
        shim=shim,
        shim_ready="sandbridge: gate on",
        host_args=("--egress", "--allow", f"gate:{service}"),
    )
    try:
        with socket.create_connection(("127.0.0.2", service), timeout=10) as conn:
            conn.sendall(b"ping")
            assert conn.recv(100) == b"echo:ping"
        proxy = http.client.HTTPConnection("127.0.0.2", 18081, timeout=10)
        proxy.request("GET", "http://not-allowed.example/")
        response = proxy.getresponse()
        assert response.status == 403
        assert b"not-allowed.example" in response.read()
    finally:
        relay.stop()
        listener.close()


def test_allow_without_egress_is_refused(runtime_dir: Path) -> None:
    result = subprocess.run(
        [*SANDBRIDGE, "host", "--runtime-dir", str(runtime_dir), "--allow", "pkgs.example.com"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "--allow needs --egress" in result.stderr


@pytest.fixture(params=["standalone", "daemon"])
def base(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Each mode: a runtime base of the test's own, or the module daemon's."""
    if request.param == "daemon":
        return request.getfixturevalue("shared_daemon").xdg  # type: ignore[no-any-return]
    return request.getfixturevalue("xdg")  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "where", ["runtime base", "state root", "inside the state root", "holds the key dir"]
)
def test_host_refuses_a_runtime_dir_that_would_show_the_container_sandbridge_state(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # The container mounts the runtime dir: one that holds the state root hands it the
    # daemon's socket and every session's control socket.
    xdg = base
    root = xdg / f"sandbridge-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    (tmp_path / "config" / "sandbridge").mkdir(mode=0o700, parents=True)
    os.chmod(tmp_path / "config", 0o700)
    path = {
        "runtime base": xdg,
        "state root": root,
        "inside the state root": root / "rt",
        "holds the key dir": tmp_path / "config",
    }[where]
    path.mkdir(mode=0o700, exist_ok=True)
    result = subprocess.run(
        [*SANDBRIDGE, "host", "--runtime-dir", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert f"--runtime-dir {path}: it " in result.stderr
    assert "give it a new directory of its own" in result.stderr
    assert not (path / "relay.sock").exists()


def test_sandbox_cannot_reach_the_daemon_socket(shared_daemon: Daemon, tmp_path: Path) -> None:
    sock = shared_daemon.xdg / f"sandbridge-{os.getuid()}" / "daemon.sock"
    assert sock.exists()
    probe = f"test -e {sock} && echo visible; ls -a {sock.parent}; echo probed"
    result = subprocess.run(
        run_argv(tmp_path, "sh", "-c", probe),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "probed" in result.stdout
    assert "visible" not in result.stdout
    assert "daemon.sock" not in result.stdout


@pytest.mark.parametrize("reads", [True, False], ids=["after reading", "unread"])
def test_a_session_the_daemon_refuses_ends_the_run_before_its_sandbox(
    xdg: Path, tmp_path: Path, reads: bool
) -> None:
    # Unread: a daemon that refuses before reading (full, out of descriptors) closes
    # with the request queued, which resets the connection; the refusal is read all the
    # same (the run used to end in a traceback).
    root = xdg / f"sandbridge-{os.getuid()}"
    root.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(root / "daemon.sock"))
    listener.listen()

    def refuse() -> None:  # a daemon of another sandbridge version, say
        # Every connection: the thin client's run request (which it leaves to the full
        # command), then the full command's.
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # shut down: the test is over
                return
            with conn:
                if reads:
                    conn.recv(65536)
                else:  # the request is queued before the refusal is sent and the close
                    select.select([conn], [], [], 10)
                conn.send(b'{"error": "protocol version 1 is not 2"}')

    thread = threading.Thread(target=refuse, daemon=True)
    thread.start()
    marker = tmp_path / "sandbox-ran"
    result = subprocess.run(
        run_argv(tmp_path, "touch", str(marker)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    listener.shutdown(socket.SHUT_RDWR)
    thread.join(10)
    listener.close()
    assert result.returncode == 2
    assert "the daemon refused the session: protocol version 1 is not 2" in result.stderr
    assert not marker.exists()
