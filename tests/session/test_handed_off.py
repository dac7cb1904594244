"""A run the daemon's builder hands to a thin client: the session's dirs are the
client's (its pid), and the builder removes them at the end, however the client ends."""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import sandbridge
from sandbridge.protocol import daemon_wire
from sandbridge.session import handed_off
from tests.conftest import REPO, SANDBRIDGE, Process, run_argv
from tests.daemon.test_server import wait_until


def sessions() -> list[dict[str, object]]:
    listed = subprocess.run(
        [*SANDBRIDGE, "ls", "--json"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    found: list[dict[str, object]] = json.loads(listed)
    return found


def test_a_killed_client_leaves_no_session_behind(
    daemon: Process, xdg: Path, tmp_path: Path
) -> None:
    client = Process(run_argv(tmp_path, "sh", "-c", "echo READY; exec sleep 600"))
    client.wait_line("READY")
    runtime_dir = xdg / f"ags-webview-relay-{client.popen.pid}"
    assert runtime_dir.is_dir()
    client.stop(signal.SIGKILL)
    wait_until(lambda: not runtime_dir.exists())
    assert sessions() == []
    daemon.wait_line("sandbridge: daemon.session_end ", "stderr")


def ask_and_leave(xdg: Path, workdir: Path, stderr: int, *words: str) -> None:
    """A thin client's run request, and the client gone before the builder answers (as
    after a Ctrl-C while the run is built): its output is ``stderr``'s pipe."""
    request = daemon_wire.run_request(
        {
            "argv": ["run", "--ro-bind", str(REPO), "--", *words],
            "cwd": str(workdir),
            "cwd_id": [workdir.stat().st_dev, workdir.stat().st_ino],
            "env": dict(os.environ),
            "umask": 0o022,
            "python": daemon_wire.python_identity(sys.executable, sys.prefix),
            "package": daemon_wire.package_identity(sandbridge.__file__, sandbridge.__version__),
        }
    )
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as client:
        client.connect(str(xdg / f"sandbridge-{os.getuid()}" / "daemon.sock"))
        fds = array.array("i", [stderr, stderr, stderr])
        client.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])


def test_a_client_gone_before_the_start_gets_no_traceback_and_no_session(
    daemon: Process, xdg: Path, tmp_path: Path
) -> None:
    read, write = os.pipe()
    with os.fdopen(read, "rb") as output:
        try:
            ask_and_leave(xdg, tmp_path, write, "true")
        finally:
            os.close(write)
        printed = output.read().decode()  # to its end: the builder's child has ended
    daemon.wait_line("sandbridge: daemon.run_built ", "stderr")
    assert "Traceback" not in printed, printed
    assert sessions() == []
    assert not list(xdg.glob("ags-webview-relay-*"))


def test_a_killed_client_without_standard_input_leaves_no_session_behind(
    daemon: Process, xdg: Path, tmp_path: Path
) -> None:
    # Its connection to the daemon takes descriptor 0, which it also sends as its input.
    closed_stdin = ["sh", "-c", 'exec "$@" <&-', "sh"]
    client = Process([*closed_stdin, *run_argv(tmp_path, "sh", "-c", "echo READY; exec sleep 600")])
    client.wait_line("READY")
    runtime_dir = xdg / f"ags-webview-relay-{client.popen.pid}"
    assert runtime_dir.is_dir()
    client.stop(signal.SIGKILL)
    wait_until(lambda: not runtime_dir.exists())
    assert sessions() == []


def test_the_wait_for_the_clients_shut_down_ends_at_once_when_it_shuts_down() -> None:
    builder, client = socket.socketpair()
    with builder, client:
        client.sendall(b'{"whatever": "it sends is not read"}')
        client.shutdown(socket.SHUT_WR)
        started = time.monotonic()
        handed_off._until_shut_down(builder)
        assert time.monotonic() - started < daemon_wire.CLOSE_TIMEOUT


@pytest.mark.parametrize("sending", [False, True], ids=["quiet", "keeps-sending"])
def test_a_client_that_never_shuts_down_is_waited_for_no_longer_than_the_bound(
    monkeypatch: pytest.MonkeyPatch, sending: bool
) -> None:
    # The run holds the placeholders' lock while it waits: a client stopped before its
    # shut down, or one that keeps talking, must not hold every other run's start. (The
    # bound shortened for the test.)
    monkeypatch.setattr(daemon_wire, "CLOSE_TIMEOUT", 0.3)
    monkeypatch.setattr(handed_off, "SHUT_DOWN_MARGIN", 0.2)
    builder, client = socket.socketpair()
    done = threading.Event()

    def talk() -> None:  # a byte every 0.1 s until the builder has stopped waiting
        while not done.wait(0.1):
            client.send(b"x")

    talker = threading.Thread(target=talk)
    with builder, client:
        client.sendall(b"x")
        if sending:
            talker.start()
        started = time.monotonic()
        try:
            handed_off._until_shut_down(builder)
        finally:
            waited = time.monotonic() - started
            done.set()
            if sending:
                talker.join()
    assert 0.5 <= waited < 5.0, waited
