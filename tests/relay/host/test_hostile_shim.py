"""A hostile shim on upstream.sock: the browser gets a 502 or a cut stream, nothing else
breaks, and the host's memory stays bounded."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import (
    PYTHON,
    REPO,
    SANDBRIDGE,
    Process,
    Relay,
    app_host,
    free_port,
    host_port_of,
    request,
)

HOSTILE_SHIM = str(REPO / "tests" / "peers" / "hostile_shim.py")
RSS_LIMIT_KIB = 64 * 1024


class HostileRelay(Relay):
    def __init__(self, runtime_dir: Path, mode: str) -> None:
        super().__init__(
            runtime_dir,
            shim=[PYTHON, HOSTILE_SHIM, str(runtime_dir / "upstream.sock"), mode],
            shim_ready="hostile shim listening",
        )


def _host_with_timeout(runtime_dir: Path, mode: str) -> HostileRelay:
    relay = HostileRelay.__new__(HostileRelay)
    relay.runtime_dir = runtime_dir
    relay.host = Process(
        [*SANDBRIDGE, "host", "--runtime-dir", str(runtime_dir), "-v", "--response-timeout", "1"]
    )
    relay.host.wait_line("sandbridge: serving registrations", "stderr")
    relay.shim = Process([PYTHON, HOSTILE_SHIM, str(runtime_dir / "upstream.sock"), mode])
    relay.shim.wait_line("hostile shim listening", "stderr")
    return relay


@pytest.fixture(params=["stream", "v1"])
def hostile(request: pytest.FixtureRequest, runtime_dir: Path) -> Iterator[HostileRelay]:
    relay = _host_with_timeout(runtime_dir, str(request.param))
    yield relay
    relay.stop()


def host_rss_kib(relay: Relay) -> int:
    status = Path(f"/proc/{relay.host.popen.pid}/status").read_text()
    return int(next(x for x in status.splitlines() if x.startswith("VmHWM:")).split()[1])


@pytest.mark.parametrize(
    "behaviour", ["garbage", "unending-headers", "crlf-in-header", "bad-status", "stall"]
)
def test_broken_answer_is_502_and_the_relay_stays_up(hostile: HostileRelay, behaviour: str) -> None:
    port = host_port_of(hostile.register(free_port()))
    status, _, body = request(port, path=f"/hostile/{behaviour}")
    assert status == 502, body
    assert request(port, path="/fine")[0] == 200
    assert host_rss_kib(hostile) < RSS_LIMIT_KIB


@pytest.mark.parametrize("behaviour", ["short-body", "stall-mid-body"])
def test_truncated_stream_is_cut_not_completed(runtime_dir: Path, behaviour: str) -> None:
    relay = _host_with_timeout(runtime_dir, "stream")
    try:
        port = host_port_of(relay.register(free_port()))
        conn = http.client.HTTPConnection(app_host(port), port, timeout=10)
        conn.request("GET", f"/hostile/{behaviour}")
        response = conn.getresponse()
        assert response.status == 200
        with pytest.raises(http.client.IncompleteRead):
            response.read()
        assert request(port, path="/fine")[0] == 200
    finally:
        relay.stop()


def test_a_body_in_pieces_lives_while_each_comes_within_the_response_timeout(
    runtime_dir: Path,
) -> None:
    """The response timeout counts from the body's last piece, not from its first (the
    pieces are relayed from the app's read callbacks: relay/listener/body_lane.py)."""
    relay = _host_with_timeout(runtime_dir, "stream")
    try:
        port = host_port_of(relay.register(free_port()))
        conn = http.client.HTTPConnection(app_host(port), port, timeout=10)
        conn.request("GET", "/hostile/slow-pieces")
        assert conn.getresponse().read() == b"one two three four"
        conn.request("GET", "/fine")
        assert conn.getresponse().read() == b"ok"
    finally:
        relay.stop()


def test_body_longer_than_declared_is_cut_at_the_declared_length(runtime_dir: Path) -> None:
    relay = _host_with_timeout(runtime_dir, "stream")
    try:
        port = host_port_of(relay.register(free_port()))
        conn = http.client.HTTPConnection(app_host(port), port, timeout=10)
        conn.request("GET", "/hostile/long-body")
        assert conn.getresponse().read() == b"hello"
        conn.request("GET", "/fine")
        assert conn.getresponse().read() == b"ok"
    finally:
        relay.stop()


def test_header_injection_never_reaches_the_browser(hostile: HostileRelay) -> None:
    port = host_port_of(hostile.register(free_port()))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"GET /hostile/crlf-in-header HTTP/1.1\r\nHost: {app_host(port)}:{port}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 502 ")
    head = answer.split(b"\r\n\r\n")[0]
    assert b"set-cookie" not in head.lower()
