"""The socket minter's one service: N new TCP sockets for a one-byte request; anything
else, or the host's end closing, ends it."""

from __future__ import annotations

import array
import socket
import subprocess
import sys
import threading

import pytest

from sandbridge.relay.host import socket_minter


def started() -> tuple[socket.socket, threading.Thread]:
    host, minter = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    thread = threading.Thread(target=lambda: socket_minter.serve(minter), daemon=True)
    thread.start()
    return host, thread


def ask(host: socket.socket, count: int) -> list[socket.socket]:
    host.send(bytes([count]))
    data, ancdata, _, _ = host.recvmsg(1, socket.CMSG_SPACE(socket_minter.MAX_BATCH * 4))
    assert data == socket_minter.ANSWER
    fds = array.array("i")
    for _, _, payload in ancdata:
        fds.frombytes(payload)
    return [socket.socket(fileno=fd) for fd in fds]


def test_each_request_gets_that_many_unconnected_dual_stack_tcp_sockets() -> None:
    """Dual stack: one socket reaches an app on 127.0.0.1 (as ::ffff:127.0.0.1) or ::1."""
    host, thread = started()
    for count in (1, 3, socket_minter.MAX_BATCH):
        made = ask(host, count)
        assert len(made) == count
        for sock in made:
            assert (sock.family, sock.type) == (socket.AF_INET6, socket.SOCK_STREAM)
            assert sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
            with pytest.raises(OSError):
                sock.getpeername()
            sock.close()
    host.close()
    thread.join(10)
    assert not thread.is_alive(), "the minter outlived the host's end"


@pytest.mark.parametrize("count", [0, socket_minter.MAX_BATCH + 1, 255])
def test_a_request_the_host_never_makes_ends_the_minter(count: int) -> None:
    host, thread = started()
    host.send(bytes([count]))
    thread.join(10)
    assert not thread.is_alive()
    assert host.recv(1) == b""  # nothing sent, the minter's end closed with it
    host.close()


def test_the_minter_isolates_itself_before_it_serves() -> None:
    # Non-dumpable (PR_GET_DUMPABLE 0), no new privileges, no capabilities left.
    probe = (
        "import ctypes; from sandbridge.relay.host.socket_minter import _isolate; _isolate(); "
        "libc = ctypes.CDLL(None); print(libc.prctl(3, 0, 0, 0, 0), libc.prctl(39, 0, 0, 0, 0)); "
        "print(open('/proc/self/status').read())"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    assert out.splitlines()[0] == "0 1"
    assert "\nCapEff:\t0000000000000000\n" in out and "\nCapPrm:\t0000000000000000\n" in out
