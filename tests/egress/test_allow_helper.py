"""``sandbridge-allow`` as a process against a real egress gate (or a hostile host), found
through ``$AGS_WEBVIEW_RELAY_SOCKET`` the way it is inside a sandbox; the sandbox itself
is in test_requests_in_sandbox.py."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.protocol.contract import RELAY_SOCKET_ENV
from tests.conftest import PYTHON, Process
from tests.egress.test_request_server import Host

HELPER = [PYTHON, "-m", "sandbridge.egress.allow_helper"]


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    running = Host(tmp_path)
    yield running
    running.stop()


def env_for(directory: Path) -> dict[str, str]:
    return {**os.environ, RELAY_SOCKET_ENV: str(directory / "relay.sock")}


def helper(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HELPER, *args], env=env_for(directory), capture_output=True, text=True, timeout=60
    )


def test_no_wait_prints_the_id_and_exits_0(host: Host, tmp_path: Path) -> None:
    result = helper(tmp_path, "other.test:80", "--reason", "docs", "--no-wait")
    assert result.returncode == 0, result.stderr
    [row] = host.owner("egress_pending")["requests"]
    assert result.stdout == row["id"] + "\n"
    assert "not waiting" in result.stderr


def test_the_owners_approval_ends_the_wait_with_0(host: Host, tmp_path: Path) -> None:
    process = Process(
        [*HELPER, "other.test:80", "--reason", "docs", "--timeout", "60"], env=env_for(tmp_path)
    )
    request_id = process.wait_line("s-test:")
    process.wait_line("sandbridge-allow: waiting up to 60 s", "stderr")
    host.owner("egress_approve", id=request_id, scope="once")
    assert process.popen.wait(30) == 0
    assert "sandbridge-allow: approved: other.test:80, one connection" in process.drain()


def test_a_refusal_is_one_line_and_status_1(host: Host, tmp_path: Path) -> None:
    result = helper(tmp_path, "gate:5432", "--reason", "db")
    assert result.returncode == 1
    assert result.stderr.startswith("sandbridge-allow: refused: 'gate:5432' is a host service")
    assert result.stderr.count("\n") == 1


def test_no_egress_gate_says_so(tmp_path: Path) -> None:
    result = helper(tmp_path, "other.test:80", "--reason", "docs")
    assert result.returncode == 1
    assert f"cannot reach the egress gate at {tmp_path / 'egress.sock'}" in result.stderr
    assert "egress requests need net = allow" in result.stderr


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["other.test"], "the following arguments are required: --reason"),
        (["other.test", "--reason", "x", "--timeout", "0"], "--timeout must be 0 < SECONDS"),
        (["other.test", "--reason", "x", "--timeout", "nan"], "--timeout must be 0 < SECONDS"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str], error: str) -> None:
    result = helper(tmp_path, *args)
    assert result.returncode == 2 and error in result.stderr


@pytest.fixture
def hostile_host(tmp_path: Path) -> Iterator[Path]:
    """A host that answers every request with garbage."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "egress.sock"))
    listener.listen()

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"\x1b[2Jnot json\n")

    thread = threading.Thread(target=serve)
    thread.start()
    yield tmp_path
    thread.join(10)
    listener.close()


def test_a_malformed_answer_is_reported(hostile_host: Path) -> None:
    result = helper(hostile_host, "other.test:80", "--reason", "docs")
    assert result.returncode == 1
    assert "sandbridge-allow: malformed answer from the host: message is not valid JSON" in (
        result.stderr
    )


def test_a_session_that_ends_while_waiting_is_reported(host: Host, tmp_path: Path) -> None:
    process = Process([*HELPER, "other.test:80", "--reason", "docs"], env=env_for(tmp_path))
    process.wait_line("sandbridge-allow: waiting up to 300 s", "stderr")
    host.stop()
    assert process.popen.wait(30) == 1
    assert "the host closed the connection without an answer (the session ended?)" in (
        process.drain()
    )
