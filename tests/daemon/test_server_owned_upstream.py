"""The daemon's sessions get app connections the daemon owns alone (relay/host/owned_upstream.py):
the run client sends the sandbox's network namespace with its request (again to a
restarted daemon), the daemon checks it and starts the session's socket minter in it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from sandbridge.places.registry import SessionEntry
from sandbridge.places.runtime_dir import RuntimeDir
from sandbridge.protocol import daemon_wire
from sandbridge.session.options import SessionOptions
from sandbridge.session.options_wire import encode
from tests.conftest import ECHO_APP, PYTHON, Process, host_port_of, run_argv, start_daemon
from tests.daemon.test_server import Asked, ask, asked, asked_daemon, wait_until
from tests.relay.host.test_owned_upstream import (
    ANSWER_BOUND,
    FLAG_THIEF,
    SANDBOX_VIEW,
    assert_minter_isolated,
    get_within,
    minter_of,
    upload_forever,
)

__all__ = ["asked", "asked_daemon"]  # the daemon the refusal tests only ask, shared


def minters_of(pid: int) -> list[int]:
    """The socket minters among the children of process ``pid``."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in children if b"socket_minter" in _cmdline(child)]


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # ended since the listing
        return b""


# How the run reaches the daemon: the thin client (cli/thin_run.py, the default), or the
# full command (session/run.py; --verbose is one of the options that take it).
CLIENTS = {"thin client": (), "full command": ("--verbose",)}


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    os.mkfifo(path / "release")
    return path


def thief(work: Path, backend: str, *options: str) -> tuple[Process, dict[str, str]]:
    """A run of the flag thief (tests/apps/flag_thief.py), and its apps' URLs."""
    process = Process(
        run_argv(work, PYTHON, FLAG_THIEF, "4173", "4174", options=("--backend", backend, *options))
    )
    urls = json.loads(process.wait_line("READY", timeout=60).removeprefix("READY "))
    return process, urls


def end(process: Process) -> None:
    try:
        process.stop()
    except subprocess.TimeoutExpired:  # a stalled host does not see its SIGTERM
        process.popen.kill()
        process.popen.wait()


@pytest.mark.parametrize("client", CLIENTS)
def test_a_sandbox_that_makes_an_app_socket_blocking_stalls_no_other_session(
    backend: str, client: str, daemon: Process, work: Path, tmp_path: Path
) -> None:
    other_work = tmp_path / "other"
    other_work.mkdir()
    other = Process(run_argv(other_work, PYTHON, ECHO_APP, "--register", "4173"))
    process: Process | None = None
    uploading: socket.socket | None = None
    try:
        report = json.loads(other.wait_line("READY", timeout=60).removeprefix("READY "))
        other_port = host_port_of(str(report["urls"][0]))
        process, urls = thief(work, backend, *CLIENTS[client])
        good = host_port_of(urls["good_url"])
        assert get_within(good, ANSWER_BOUND) == 200
        uploading = upload_forever(host_port_of(urls["victim_url"]))
        process.wait_line("CLEARED ")
        # The daemon now writes to an app that reads nothing more; the other session's
        # app and the thief's other app answer (before: both timed out).
        for _ in range(3):
            assert get_within(other_port, ANSWER_BOUND) == 200
            assert get_within(good, ANSWER_BOUND) == 200
        assert len(minters_of(daemon.popen.pid)) == 2  # the daemon's: one per session
        uploading.close()
        (work / "release").write_text("go")
        assert process.wait_line("HANDOFFS ") == "HANDOFFS 0"
        assert process.popen.wait(30) == 0, process.drain()
    finally:
        if uploading is not None:
            uploading.close()
        if process is not None:
            end(process)
        end(other)


def test_the_daemons_minter_is_not_visible_inside_and_ends_with_the_session(
    backend: str, daemon: Process, work: Path
) -> None:
    process = Process(run_argv(work, PYTHON, "-c", SANDBOX_VIEW, options=("--backend", backend)))
    try:
        line = process.wait_line("sandbridge: sandbox port 4173 -> ", "stderr", timeout=60)
        port = host_port_of(line.rsplit(" ", 1)[1])
        assert get_within(port, ANSWER_BOUND) == 502  # nothing listens inside
        minter = minter_of(daemon.popen.pid)
        assert_minter_isolated(minter, process)
        (work / "release").write_text("go")
        assert process.popen.wait(30) == 0
        # The client waits for the daemon to close the session, which reaps its minter.
        assert not Path(f"/proc/{minter}").exists()
        assert daemon.popen.poll() is None
    finally:
        end(process)


def test_a_restarted_daemon_keeps_the_session_on_owned_sockets(
    backend: str, xdg: Path, work: Path
) -> None:
    daemon = start_daemon()
    process: Process | None = None
    uploading: socket.socket | None = None
    try:
        process, urls = thief(work, backend)
        good = host_port_of(urls["good_url"])
        assert get_within(good, ANSWER_BOUND) == 200
        first = minter_of(daemon.popen.pid)
        daemon.stop()
        assert not Path(f"/proc/{first}").exists()
        daemon = start_daemon()
        process.wait_line("sandbridge: the daemon serves this session again", "stderr")
        uploading = upload_forever(host_port_of(urls["victim_url"]))
        process.wait_line("CLEARED ")
        for _ in range(3):
            assert get_within(good, ANSWER_BOUND) == 200
        minter_of(daemon.popen.pid)  # the new daemon's own
        uploading.close()
        (work / "release").write_text("go")
        assert process.wait_line("HANDOFFS ") == "HANDOFFS 0"
        assert process.popen.wait(30) == 0, process.drain()
    finally:
        if uploading is not None:
            uploading.close()
        if process is not None:
            end(process)
        end(daemon)


def _descriptor(kind: str, tmp_path: Path, held: list[socket.socket]) -> int:
    if kind == "mount namespace":
        return os.open("/proc/self/ns/mnt", os.O_RDONLY)
    if kind == "user namespace":
        return os.open("/proc/self/ns/user", os.O_RDONLY)
    if kind == "FIFO":
        os.mkfifo(tmp_path / "fifo")
        return os.open(tmp_path / "fifo", os.O_RDONLY | os.O_NONBLOCK)
    if kind == "file named like one":
        (tmp_path / "net:[1]").write_text("")
        return os.open(tmp_path / "net:[1]", os.O_RDONLY)
    held.extend(socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET))
    return os.dup(held[0].fileno())


@pytest.mark.parametrize(
    ("kind", "named"),
    [
        ("mount namespace", "'mnt:["),
        ("user namespace", "'user:["),
        ("FIFO", "/fifo'"),
        ("file named like one", "/net:[1]'"),
        ("socket", "'socket:["),
    ],
)
def test_a_bad_descriptor_in_place_of_the_namespace_is_refused_by_name(
    asked: Asked, tmp_path: Path, kind: str, named: str
) -> None:
    daemon, xdg = asked.daemon, asked.xdg
    runtime = RuntimeDir.create(xdg / "ags-webview-relay-namespace")
    entry = SessionEntry.create("namespace", tmp_path)
    held: list[socket.socket] = []
    fd = _descriptor(kind, tmp_path, held)
    before = len(os.listdir(f"/proc/{daemon.popen.pid}/fd"))
    try:
        message = daemon_wire.request(
            encode(SessionOptions(workdir=tmp_path)),
            str(runtime.path),
            str(entry.path),
            namespace=True,
        )
        answer = ask(xdg, message, [runtime.fd, entry.fd, fd])
    finally:
        os.close(fd)
        for sock in held:
            sock.close()
        entry.remove()
        runtime.remove()
    error = str(answer["error"])
    assert error.startswith("the last descriptor is "), error
    assert named in error
    assert error.endswith(", not a network namespace (the request says 'namespace': true)")
    wait_until(lambda: len(os.listdir(f"/proc/{daemon.popen.pid}/fd")) <= before)


def test_a_request_that_says_namespace_needs_its_descriptor(asked: Asked, tmp_path: Path) -> None:
    xdg = asked.xdg
    runtime = RuntimeDir.create(xdg / "ags-webview-relay-namespace")
    entry = SessionEntry.create("namespace", tmp_path)
    try:
        options = encode(SessionOptions(workdir=tmp_path))
        with_flag = daemon_wire.request(options, str(runtime.path), str(entry.path), namespace=True)
        assert ask(xdg, with_flag, [runtime.fd, entry.fd]) == {
            "error": "a request with a network namespace carries 3 or 4 descriptors, not 2"
        }
        message = json.loads(with_flag)
        message["namespace"] = "yes"
        assert ask(xdg, json.dumps(message).encode(), [runtime.fd, entry.fd]) == {
            "error": "a daemon request's 'namespace' is true or absent, not 'yes'"
        }
    finally:
        entry.remove()
        runtime.remove()
