"""``terminal.sock`` is as hostile as ``upstream.sock``: the host never connects through a
path the sandbox swapped, never waits on it, and a peer that answers garbage costs only
that attach (real sockets, the peer in a process of its own)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.exceptions import ControlError, ControlRefusal
from sandbridge.places.registry import SessionEntry
from sandbridge.terminals import frames, keys
from sandbridge.terminals.attach import attach
from sandbridge.terminals.broker import TerminalBroker
from sandbridge.terminals.control import call
from sandbridge.terminals.frames import Kind
from sandbridge.terminals.journal import ReservationJournal
from sandbridge.terminals.settings import TerminalSettings
from sandbridge.terminals.worker_socket import WorkerSocket
from tests.terminals.test_broker import _approved_request

NOBODY = 65534


@pytest.fixture(autouse=True)
def private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
        path = tmp_path / name.lower()
        path.mkdir(mode=0o700)
        monkeypatch.setenv(name, str(path))


@pytest.fixture
def runtime_dir(tmp_path: Path) -> Path:
    path = tmp_path / "rt"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def host_service(tmp_path: Path) -> Iterator[socket.socket]:
    """A listening host socket the sandbox would like the host to talk to."""
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "host-service.sock"))
        server.listen()
        server.setblocking(False)
        yield server


def _start(runtime_dir: Path) -> None:
    async def scenario() -> None:
        await WorkerSocket(runtime_dir).start_worker()

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_a_symlink_to_a_host_socket_is_refused_and_never_connected(
    runtime_dir: Path, host_service: socket.socket
) -> None:
    (runtime_dir / "terminal.sock").symlink_to(host_service.getsockname())
    assert WorkerSocket(runtime_dir).unavailable() == (
        f"{runtime_dir / 'terminal.sock'} is not a socket; refusing to use it"
    )
    with pytest.raises(ControlRefusal, match=r"terminal\.sock is a symlink; refusing to follow it"):
        _start(runtime_dir)
    with pytest.raises(BlockingIOError):
        host_service.accept()  # nothing ever connected


@pytest.mark.parametrize("kind", ["file", "fifo"])
def test_a_file_or_fifo_is_refused(runtime_dir: Path, kind: str) -> None:
    path = runtime_dir / "terminal.sock"
    if kind == "file":
        path.write_text("")
    else:
        os.mkfifo(path)
    assert WorkerSocket(runtime_dir).unavailable() == f"{path} is not a socket; refusing to use it"
    with pytest.raises(ControlRefusal, match=r"terminal\.sock is not a socket; refusing to use it"):
        _start(runtime_dir)


def test_a_missing_socket_names_the_shim_option(runtime_dir: Path) -> None:
    assert WorkerSocket(runtime_dir).unavailable() == (
        "no terminal.sock in the runtime dir: run sandbridge shim --terminals inside the sandbox"
    )
    with pytest.raises(ControlRefusal, match="is sandbridge shim --terminals running"):
        _start(runtime_dir)


def test_a_socket_of_another_user_is_refused(runtime_dir: Path) -> None:
    assert os.getuid() == 0, "chown to another user needs root"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(runtime_dir / "terminal.sock"))
        server.listen()
        os.chown(runtime_dir / "terminal.sock", NOBODY, NOBODY)
        with pytest.raises(ControlRefusal, match=f"is owned by uid {NOBODY}; refusing to use it"):
            _start(runtime_dir)


def test_a_socket_this_host_serves_is_refused(runtime_dir: Path) -> None:
    """The sandbox moved relay.sock (served by the host itself) to terminal.sock."""
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(runtime_dir / "terminal.sock"))
        server.listen()
        with pytest.raises(ControlRefusal, match="is a socket this host serves"):
            _start(runtime_dir)


def test_a_full_queue_is_refused_at_once_not_waited_on(runtime_dir: Path) -> None:
    """A listener that never accepts, its queue full: a blocking connect would hang the
    host's event loop (every session of the daemon) for as long as the sandbox likes."""
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(runtime_dir / "terminal.sock"))
        server.listen(0)
        with socket.socket(socket.AF_UNIX) as filler:
            filler.connect(str(runtime_dir / "terminal.sock"))
            started = time.monotonic()
            busy = r"terminal\.sock accepts no connection \(its queue is full\)"
            with pytest.raises(ControlRefusal, match=busy):
                _start(runtime_dir)
            assert time.monotonic() - started < 5


def _ready_without_keys() -> bytes:
    return frames.encode(Kind.READY, b'{"public": "00"}')


def _oversized() -> bytes:
    return bytes([Kind.READY]) + (1 << 30).to_bytes(4, "big")


def _cipher_first() -> bytes:
    return frames.encode(Kind.CIPHER, b"x" * 40)


GARBAGE_PEERS = {
    "garbage bytes": os.urandom(64),
    "an oversized frame": _oversized(),
    "READY without keys": _ready_without_keys(),
    "CIPHER before READY": _cipher_first(),
    "unknown frame kind": b"\x09\0\0\0\0",
    "closes at once": b"",
}
# A peer in its own process (the host refuses a socket it serves itself): it accepts one
# connection, sends its bytes and keeps the connection open until the test ends it.
PEER = """
import socket, sys
server = socket.socket(socket.AF_UNIX)
server.bind(sys.argv[1])
server.listen()
print("listening", flush=True)
conn, _ = server.accept()
conn.sendall(bytes.fromhex(sys.argv[2]))
if sys.argv[2]:
    sys.stdin.read()
"""


@pytest.mark.parametrize("behaviour", list(GARBAGE_PEERS))
def test_a_peer_that_answers_garbage_costs_only_that_attach(
    tmp_path: Path, runtime_dir: Path, behaviour: str
) -> None:
    peer = subprocess.Popen(
        [sys.executable, "-c", PEER, str(runtime_dir / "terminal.sock"),
         GARBAGE_PEERS[behaviour].hex()],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert peer.stdout is not None and peer.stdout.readline() == b"listening\n"

    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        broker = TerminalBroker(
            entry.id,
            entry.control_socket,
            WorkerSocket(runtime_dir),
            TerminalSettings(ready_budget=3.0),
        )
        await broker.start()
        try:
            owner = keys.owner_key()
            request_id = await _approved_request(owner)
            with pytest.raises(ControlError) as refused:
                await attach(request_id, owner)
            assert refused.value.code == "not_ready"
            states = [r["state"] for r in ReservationJournal().ring.records()]
            assert states == ["aborted"]
            info = await asyncio.to_thread(call, "web", {"op": "info"})
            assert info["session"] == "web"  # and the session keeps serving
        finally:
            await broker.close()
            entry.remove()

    try:
        asyncio.run(asyncio.wait_for(scenario(), 30))
    finally:
        peer.kill()
        peer.wait()


@pytest.mark.parametrize("kind", ["symlink", "file"])
def test_a_swapped_terminal_sock_spends_no_approval(
    tmp_path: Path, runtime_dir: Path, host_service: socket.socket, kind: str
) -> None:
    path = runtime_dir / "terminal.sock"
    if kind == "symlink":
        path.symlink_to(host_service.getsockname())
    else:
        path.write_text("")

    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        broker = TerminalBroker(entry.id, entry.control_socket, WorkerSocket(runtime_dir))
        await broker.start()
        try:
            owner = keys.owner_key()
            request_id = await _approved_request(owner)
            with pytest.raises(ControlError) as refused:
                await attach(request_id, owner)
            assert refused.value.code == "no_sandbox"
            assert str(refused.value) == f"{path} is not a socket; refusing to use it"
            assert ReservationJournal().ring.records() == []
        finally:
            await broker.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 30))
    with pytest.raises(BlockingIOError):
        host_service.accept()
