"""Connection handoff: the host speaks to the app over the socket the shim hands over,
and refuses (502, that request only, nothing leaked) any descriptor that is not a
connected TCP socket to 127.0.0.1 on the registered port."""

from __future__ import annotations

import http.client
import os
import time
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

HANDOFF_SHIM = str(REPO / "tests" / "peers" / "handoff_shim.py")
HOSTILE_KINDS = [
    "none",
    "two",
    "many",
    "pipe",
    "unix",
    "udp",
    "listening",
    "wrong-port",
    "unoffered",
    "bytes-after",
]
# How long the host may take to close what it refused once the exchange is over.
SETTLE_SECONDS = 10.0


def tcp_peer_ports(pid: int) -> list[int]:
    """Remote ports of the TCP sockets process ``pid`` holds (from /proc, no tools)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = []
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            if fields[9] in inodes:
                ports.append(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def fds_settle_to(pid: int, count: int) -> bool:
    """Poll (with a deadline) until process ``pid`` holds at most ``count`` descriptors."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while open_fds(pid) > count:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_requests_go_to_the_app_over_the_handed_over_socket(relay: Relay, app_port: int) -> None:
    port = host_port_of(relay.register(app_port))
    conn = http.client.HTTPConnection(app_host(port), port, timeout=10)
    try:
        for _ in range(3):
            conn.request("GET", "/")
            response = conn.getresponse()
            assert response.status == 200
            response.read()
        assert app_port in tcp_peer_ports(relay.host.popen.pid)
        assert app_port not in tcp_peer_ports(relay.shim.popen.pid)
    finally:
        conn.close()


class HandoffShimRelay(Relay):
    def __init__(self, runtime_dir: Path, kind: str, host_args: tuple[str, ...] = ()) -> None:
        self.runtime_dir = runtime_dir
        self.host = Process(
            [*SANDBRIDGE, "host", "--runtime-dir", str(runtime_dir), "-v", *host_args]
        )
        self.host.wait_line("sandbridge: serving registrations", "stderr")
        self.shim = Process([PYTHON, HANDOFF_SHIM, str(runtime_dir / "upstream.sock"), kind])
        line = self.shim.wait_line("handoff shim listening", "stderr")
        self.app_port = int(line.rsplit("=", 1)[1])


# The good app's idle pooled connections (relay/listener/app_pool.py) are closed this soon, so the
# host's descriptors settle back to the baseline without waiting out the default 2 s.
POOL_IDLE = ("--app-pool-idle", "0.1")


@pytest.fixture(params=HOSTILE_KINDS)
def hostile(request: pytest.FixtureRequest, runtime_dir: Path) -> Iterator[HandoffShimRelay]:
    relay = HandoffShimRelay(runtime_dir, str(request.param), POOL_IDLE)
    yield relay
    relay.stop()


def test_hostile_handoff_is_a_502_and_leaks_nothing(hostile: HandoffShimRelay) -> None:
    good = host_port_of(hostile.register(hostile.app_port))
    bad = host_port_of(hostile.register(free_port()))
    host_pid = hostile.host.popen.pid
    # Taken before any request: no browser or upstream connection is open (a closing
    # registration connection could only make the baseline higher, never flaky). Five
    # refusals leak at least five descriptors if any is kept.
    baseline = open_fds(host_pid)
    assert request(good, path="/")[0] == 200
    for _ in range(5):
        status, _, body = request(bad, path="/")
        assert status == 502, body
    assert request(good, path="/")[0] == 200
    assert fds_settle_to(host_pid, baseline), "the host kept a descriptor it refused"


def test_a_refused_handoff_is_logged(runtime_dir: Path) -> None:
    relay = HandoffShimRelay(runtime_dir, "pipe")
    try:
        bad = host_port_of(relay.register(free_port()))
        assert request(bad, path="/")[0] == 502
        line = relay.host.wait_line("sandbridge: upstream.handoff_refused", "stderr")
        assert "not a socket" in line
    finally:
        relay.stop()


# A close that blocked the event loop would hold it for 600 s (the socket's SO_LINGER):
# every request of another app, and a registration, must be answered well within this.
ANSWER_SECONDS = 5.0


def timed_request(port: int) -> int:
    conn = http.client.HTTPConnection(app_host(port), port, timeout=ANSWER_SECONDS)
    try:
        conn.request("GET", "/")
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["lingering", "lingering-adopted"])
def test_a_lingering_socket_from_the_sandbox_costs_only_its_request(
    runtime_dir: Path, kind: str
) -> None:
    relay = HandoffShimRelay(runtime_dir, kind, ("--response-timeout", "1", *POOL_IDLE))
    try:
        good = host_port_of(relay.register(relay.app_port))
        bad = host_port_of(relay.register(free_port()))
        host_pid = relay.host.popen.pid
        baseline = open_fds(host_pid)
        assert timed_request(good) == 200
        # Refused at once, or adopted and then given up (the app never answers): a 502.
        assert timed_request(bad) == 502
        # The host has let go of the lingering socket: its descriptor leaves the table
        # before a close waits out the linger, so a close the event loop waited on would
        # hold it from here on, and the next request and registration would time out.
        assert fds_settle_to(host_pid, baseline), "the host kept the lingering socket"
        assert timed_request(good) == 200
        started = time.monotonic()
        relay.register(free_port())
        assert time.monotonic() - started < ANSWER_SECONDS
    finally:
        relay.stop()
