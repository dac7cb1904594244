"""Descriptors from the sandbox never block whoever lets them go."""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.aio import before_loop, untrusted_fds
from sandbridge.aio.before_loop import bind_unix_socket
from sandbridge.exceptions import ControlRefusal
from sandbridge.terminals.sandbox_channel import worker_socket

LINGER_600 = struct.pack("ii", 1, 600)
# A release is a queue put: far below this even on a loaded machine; the close it
# replaces would take 600 s.
RELEASE_SECONDS = 0.5


@pytest.fixture
def sink() -> Iterator[socket.socket]:
    """A listener that never accepts: a peer that never reads."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        yield listener


def lingering_socket(sink: socket.socket) -> socket.socket:
    """Send queue full toward a peer that never reads, SO_LINGER 600 s."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sock.connect(sink.getsockname())
    sock.setblocking(False)
    with pytest.raises(BlockingIOError):
        while True:
            sock.send(b"x" * 65536)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_600)
    return sock


def linger_of(sock: socket.socket) -> tuple[int, int]:
    onoff, seconds = struct.unpack("ii", sock.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8))
    return onoff, seconds


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_releasing_a_lingering_socket_returns_at_once_and_closes_it(sink: socket.socket) -> None:
    fd = lingering_socket(sink).detach()
    started = time.monotonic()
    untrusted_fds.release(fd)
    assert time.monotonic() - started < RELEASE_SECONDS
    assert untrusted_fds.settle()
    assert not is_open(fd)


def test_received_sockets_have_linger_turned_off(sink: socket.socket) -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs, lingering_socket(sink) as stuck:
        socket.send_fds(theirs, [b"x"], [stuck.fileno()])
        fds: list[int] = []
        data, truncated = untrusted_fds.receive(ours, 16, 4, fds)
        assert (data, truncated, len(fds)) == (b"x", False, 1)
        with socket.socket(fileno=fds[0]) as received:
            assert linger_of(received)[0] == 0  # off (Linux keeps the old seconds)


def test_descriptors_beyond_the_room_are_reported_as_truncated() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        socket.send_fds(theirs, [b"x"], [theirs.fileno()] * 10)
        fds: list[int] = []
        _, truncated = untrusted_fds.receive(ours, 16, 4, fds)
        assert truncated
        untrusted_fds.release_all(fds)
        assert fds == []


def test_a_transport_duplicate_is_never_the_last_reference(sink: socket.socket) -> None:
    stuck = lingering_socket(sink)
    duplicate = untrusted_fds.for_transport(stuck)
    started = time.monotonic()
    duplicate.close()  # what the event loop does: the original is still open
    assert time.monotonic() - started < RELEASE_SECONDS
    untrusted_fds.release_socket(stuck)
    assert untrusted_fds.settle()


def test_host_listeners_refuse_descriptors(tmp_path: Path) -> None:
    with bind_unix_socket(tmp_path / "relay.sock") as listener:
        if listener.getsockopt(socket.SOL_SOCKET, before_loop.SO_PASSRIGHTS) != 0:
            pytest.skip("this kernel cannot refuse descriptors (SO_PASSRIGHTS, Linux 6.16)")
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(tmp_path / "relay.sock"))
            with pytest.raises(PermissionError):
                socket.send_fds(client, [b"{}\n"], [client.fileno()])


def test_a_terminal_worker_must_be_a_unix_stream_socket(sink: socket.socket) -> None:
    fd = lingering_socket(sink).detach()
    with pytest.raises(ControlRefusal, match="did not start a worker"):
        worker_socket([fd], False)
    assert untrusted_fds.settle()
    assert not is_open(fd)
