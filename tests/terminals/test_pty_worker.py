"""The PTY worker's pure parts (its clean environment, its view of descendants) and how its
process ends when the host goes away."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys

import pytest

from sandbridge.terminals import channel, pty_worker
from sandbridge.terminals.frames import FROM_WORKER, FrameDecoder, Kind, encode


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ("xterm-256color", "xterm-256color"),
        ("screen.xterm", "screen.xterm"),
        ("x; rm -rf /", "xterm-256color"),
        ("", "xterm-256color"),
        ("a" * 65, "xterm-256color"),
    ],
)
def test_clean_environment_keeps_only_its_own_names(term: str, expected: str) -> None:
    env = pty_worker.clean_environment(term, "/home/x", "/bin/bash")
    assert sorted(env) == ["HOME", "LANG", "PATH", "PS1", "SANDBRIDGE_TERMINAL", "SHELL", "TERM"]
    assert env["TERM"] == expected
    assert not set(env) & {"HOST_SECRET", "AGS_WEBVIEW_RELAY_SOCKET", "SSH_AUTH_SOCK"}


def test_descendants_include_grandchildren_and_exclude_others() -> None:
    child = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE)
    assert child.stdout is not None
    grandchild = int(child.stdout.readline())
    try:
        found = pty_worker.descendants(os.getpid())
        assert child.pid in found and grandchild in found
        assert os.getppid() not in found
    finally:
        os.kill(grandchild, 9)
        child.wait()


def _worker() -> tuple[socket.socket, subprocess.Popen[str], bytes]:
    """A real PTY worker on a socketpair: the host's end, the process, and a START."""
    host, worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    process = subprocess.Popen(
        [sys.executable, "-m", "sandbridge.terminals.pty_worker", "--fd", str(worker.fileno())],
        pass_fds=[worker.fileno()],
        stderr=subprocess.PIPE,
        text=True,
    )
    worker.close()
    start = {"rows": 24, "cols": 80, "lease": 10, "idle": 60, "hangup_grace": 0.1}
    body = {**start, "term": "xterm", "client_public": channel.keypair()[0].hex()}
    return host, process, encode(Kind.START, json.dumps(body).encode())


def _ended_quietly(process: subprocess.Popen[str]) -> None:
    try:
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
    assert process.stderr is not None
    assert process.stderr.read() == ""


def test_a_host_that_closes_with_frames_unread_ends_the_worker_without_a_traceback() -> None:
    """An AF_UNIX peer that closes with data unread resets the connection: the worker's
    next read fails with ECONNRESET, which means the host went away, as EPIPE does."""
    host, process, start = _worker()
    with host:
        host.sendall(start)
        assert host.recv(1)  # READY has begun to arrive; the rest of it stays unread
    _ended_quietly(process)


def test_after_its_end_the_worker_leaves_the_close_to_the_host() -> None:
    """The worker says ENDED and then waits for the host to close the link: the host's
    STOP, sent as a client leaves at the same moment, reaches a live link instead of
    failing (EPIPE closed the host's side with ENDED unread, and the audit named the
    client's leaving instead of the worker's end)."""
    host, process, start = _worker()
    decoder = FrameDecoder(FROM_WORKER)

    def until(kind: Kind) -> None:
        while True:
            data = host.recv(65536)
            assert data, f"the worker closed before {kind.name}"
            if any(frame.kind is kind for frame in decoder.feed(data)):
                return

    with host:
        host.settimeout(30)
        host.sendall(start)
        until(Kind.READY)
        host.sendall(encode(Kind.STOP, json.dumps({"reason": "revoked"}).encode()))
        until(Kind.ENDED)
        # The worker is still there: it reads what the host sends and has not closed.
        host.sendall(encode(Kind.STOP, json.dumps({"reason": "client"}).encode()))
        assert select.select([host], [], [], 1.0)[0] == []
        assert process.poll() is None
        host.shutdown(socket.SHUT_WR)
        assert host.recv(1) == b""  # it closes once the host has
    _ended_quietly(process)
