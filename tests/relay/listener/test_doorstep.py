"""Accepted browser connections that have sent nothing yet
(:mod:`sandbridge.relay.listener.doorstep`): they count toward the connection limits from
accept on, a silent one is closed at the keep-alive timeout and gives its place back, and
a connection's first request, whole or in pieces, is served as before. A real host and shim
in front of the echo app."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.conftest import Relay, host_field, host_port_of, module_relay, request

CAP = 2
KEEPALIVE = 1.0


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relay]:
    """One relay for the module: the cap is per app, and each test registers its own."""
    options = ("--max-connections-per-app", str(CAP), "--keepalive-timeout", str(KEEPALIVE))
    with module_relay(tmp_path_factory, host_args=options) as relay:
        yield relay


@pytest.fixture(scope="module")
def app_port(shared_app_port: int) -> int:
    return shared_app_port


def get(port: int, extra: str = "") -> bytes:
    return f"GET /x HTTP/1.1\r\nHost: {host_field(port).decode()}\r\n{extra}\r\n".encode()


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def test_silent_connections_count_until_the_keep_alive_timeout_closes_them(
    capped: Relay, app_port: int
) -> None:
    port = host_port_of(capped.register(app_port))
    silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(CAP)]
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
            extra.sendall(get(port, "Connection: close\r\n"))
            assert status_of(extra.recv(4096)) == 503  # the silent ones hold both places
        for sock in silent:
            assert sock.recv(1) == b""  # closed by the relay, not by us
        assert KEEPALIVE * 0.8 < time.monotonic() - started < KEEPALIVE + 5
        status, _, _ = request(port)  # their places are back
        assert status == 200
    finally:
        for sock in silent:
            sock.close()


def test_a_connection_closed_before_its_first_byte_gives_its_place_back(
    capped: Relay, app_port: int
) -> None:
    port = host_port_of(capped.register(app_port))
    for _ in range(CAP * 5):
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
    deadline = time.monotonic() + 10
    while True:  # the relay sees the closes in its own time: observe, with a deadline
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(get(port, "Connection: close\r\n"))
            status = status_of(sock.recv(4096))
        if status == 200 or time.monotonic() > deadline:
            break
    assert status == 200


def test_a_first_request_in_pieces_is_served(capped: Relay, app_port: int) -> None:
    port = host_port_of(capped.register(app_port))
    head = get(port, "Connection: close\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(head[:5])
        time.sleep(0.05)  # two reads on the relay's side, not one (not synchronisation)
        sock.sendall(head[5:])
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert status_of(answer) == 200
    assert b'"path": "/x"' in answer


@pytest.mark.parametrize(
    "cut",
    [
        b"POST /cut HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
        b"GET /half HTTP/1.1\r\nHo",
        b"GET /bad HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    ],
    ids=["mid-body", "mid-head", "refused"],
)
def test_what_a_connection_leaves_unfinished_never_reaches_the_next(
    capped: Relay, app_port: int, cut: bytes
) -> None:
    """New connections reuse the request readers of finished ones: one that ended
    mid-request, or refused, is not reused, and the next connection reads as new."""
    port = host_port_of(capped.register(app_port))
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(cut.replace(b"{host}", host_field(port)))
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):  # the relay closes it (after a refusal, if any)
                pass
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(get(port, "Connection: close\r\n"))
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert status_of(answer) == 200, answer
        assert b'"path": "/x"' in answer
