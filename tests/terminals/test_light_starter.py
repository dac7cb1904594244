"""Terminal starts over the host's private channel without an event loop: a real
session's entry attaches a terminal and never loads one; and the starter in this
process, on a poll loop in a thread, against a host played by the test: a start gives
a ready worker, anything else is answered ``unknown request``, a worker that ends is
reaped, the host's end closes the service."""

from __future__ import annotations

import json
import os
import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.aio.poll_loop import PollLoop
from sandbridge.terminals import channel, frames
from sandbridge.terminals.frames import FROM_WORKER, FrameDecoder, Kind
from sandbridge.terminals.light_starter import MAX_MESSAGE, LightStarter
from sandbridge.terminals.pty_worker import descendants
from tests.conftest import event_loop_libraries, is_sandbox_entry, memory_kib
from tests.terminals.harness import PROMPT, TerminalSession, finish

# issue 15's bound on the entry's memory (RSS).
ENTRY_RSS_LIMIT_KIB = 16 * 1024


def _entry_of(session: TerminalSession) -> int:
    for pid in descendants(session.process.popen.pid):
        if is_sandbox_entry(pid):
            return pid
    raise AssertionError("no sandbox entry in the session")


def test_a_terminal_is_attached_without_the_entry_loading_the_event_loop(
    tmp_path: Path,
) -> None:
    session = TerminalSession(tmp_path)
    try:
        child = session.attach(session.approved())
        child.expect(PROMPT)
        child.sendline("echo IN-$((6*7))")
        child.expect("IN-42")
        entry = _entry_of(session)
        assert event_loop_libraries(entry) == []
        assert memory_kib(entry) < ENTRY_RSS_LIMIT_KIB
        child.sendline("exit 3")
        assert finish(child)[0] == 3
    finally:
        session.stop()


# --- the starter in this process, on its poll loop in a thread ----------------------


class StarterServer:
    """A LightStarter on a PollLoop run by a thread; ``host`` is the host's end."""

    def __init__(self) -> None:
        self.host, sandbox_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.host.settimeout(30)
        self.loop = PollLoop()
        self.starter = LightStarter(self.loop, sandbox_end.detach())
        self._wake, self._waker = socket.socketpair()
        self.loop.add_reader(self._wake.fileno(), self.loop.stop)
        self.starter.start()
        self._thread = threading.Thread(target=self.loop.run)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop after what is ready now has been served."""
        if self._thread.is_alive():
            self._waker.send(b"x")
            self._thread.join(30)

    def close(self) -> None:
        self.stop()
        self.starter.close()
        for sock in (self.host, self._wake, self._waker):
            sock.close()


@pytest.fixture
def server() -> Iterator[StarterServer]:
    running = StarterServer()
    yield running
    running.close()


def _read_frame(link: socket.socket) -> frames.Frame:
    decoder = FrameDecoder(FROM_WORKER)
    while True:
        data = link.recv(65536)
        assert data, "the worker closed its link"
        found = decoder.feed(data)
        if found:
            return found[0]


def _start(server: StarterServer) -> tuple[int, socket.socket]:
    server.host.send(json.dumps({"op": "start"}).encode())
    message, fds, _, _ = socket.recv_fds(server.host, MAX_MESSAGE, 1)
    answer = json.loads(message)
    assert answer["ok"] is True and len(fds) == 1
    link = socket.socket(fileno=fds[0])
    link.settimeout(30)
    return int(answer["pid"]), link


def test_a_start_gives_the_host_the_link_of_a_ready_worker(server: StarterServer) -> None:
    _, link = _start(server)
    with link:
        public, _ = channel.keypair()
        start = {
            "client_public": public.hex(), "rows": 24, "cols": 80, "term": "xterm",
            "lease": 5, "final": False, "idle": 60, "hangup_grace": 0.5,
        }  # fmt: skip
        link.sendall(frames.encode(Kind.START, json.dumps(start).encode()))
        ready = _read_frame(link)
    assert ready.kind is Kind.READY
    assert len(bytes.fromhex(json.loads(ready.body)["public"])) == channel.PUBLIC_BYTES


@pytest.mark.parametrize(
    "message",
    [b"not json", b'{"op":"stop"}', b"[1]", b'{"op":"start"' + b" " * 2000 + b"}"],
    ids=["not-json", "other-op", "not-an-object", "too-long"],
)
def test_anything_but_a_start_is_answered_unknown_request(
    server: StarterServer, message: bytes
) -> None:
    server.host.send(message)
    assert json.loads(server.host.recv(MAX_MESSAGE)) == {"ok": False, "error": "unknown request"}
    assert server.starter.workers == 0


def test_a_worker_that_ends_is_reaped(server: StarterServer) -> None:
    pid, link = _start(server)
    ended = os.pidfd_open(pid)
    try:
        assert server.starter.workers == 1
        link.close()  # no START: the worker ends
        assert select.select([ended], [], [], 30)[0] == [ended]
        server.stop()  # the loop serves what is ready (the worker's end) before it stops
    finally:
        os.close(ended)
    assert server.starter.workers == 0
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped: no zombie left


def test_the_host_closing_its_end_ends_the_service(server: StarterServer) -> None:
    server.host.close()
    server.stop()
    # Nothing left to watch but the test's own waker: the channel is closed.
    assert set(server.loop._readers) == {server._wake.fileno()}
