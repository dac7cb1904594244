"""Another local user's connections never reach an app, nor count toward its limits: the
owner's browser is served under a flood of 1,100 idle connections from user nobody."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from sandbridge.relay.host.local_peer import PeerOwners, _uid_from_proc
from tests.conftest import REPO, Process, Relay, host_port_of, request

FLOOD = str(REPO / "tests" / "peers" / "idle_flood.py")
# Past the per-app limit (1,024): before the check, this flood locked the owner out.
FLOOD_CONNECTIONS = 1100
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="runs a flood as user nobody")


def flood(port: int) -> Process:
    process = Process([*AS_NOBODY, "/usr/bin/python3", FLOOD, str(port), str(FLOOD_CONNECTIONS)])
    process.wait_line(f"flooding {FLOOD_CONNECTIONS} connected", timeout=60)
    return process


@needs_root
@pytest.mark.parametrize("private", [False, True], ids=["public", "private"])
def test_the_owner_is_served_under_another_users_flood(
    runtime_dir: Path, app_port: int, private: bool
) -> None:
    relay = Relay(runtime_dir, host_args=("--private",) if private else ())
    flooder = None
    try:
        url = relay.register(app_port)
        port = host_port_of(url)
        flooder = flood(port)
        assert flooder.wait_line("refused ", timeout=60) == f"refused {FLOOD_CONNECTIONS}"
        if private:  # the token URL, once: the owner gets the app's cookie
            status, _, body = request(port, path="/" + url.split("/", 3)[3])
            assert status == 303, body
        else:
            for _ in range(3):
                status, _, body = request(port)
                assert status == 200, body
    finally:
        if flooder is not None:
            flooder.stop()
        relay.stop()


def test_the_owner_of_a_loopback_connection_is_found() -> None:
    owners = PeerOwners()
    with (
        socket.create_server(("127.0.0.1", 0)) as server,
        socket.create_connection(server.getsockname()),
    ):
        accepted, _ = server.accept()
        with accepted:
            local, remote = accepted.getsockname(), accepted.getpeername()
            assert owners.client_uid(local, remote) == os.geteuid()
            assert _uid_from_proc(local, remote) == os.geteuid()
            assert owners.is_owner(local, remote)
    owners.close()


@needs_root
def test_another_users_connection_is_not_the_owners() -> None:
    owners = PeerOwners(uid=1)  # neither root nor nobody; root is accepted too
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        code = (
            f"import socket,sys;s=socket.create_connection(('127.0.0.1',{port}));"
            "print('connected',flush=True);sys.stdin.read()"
        )
        client = subprocess.Popen(
            [*AS_NOBODY, "/usr/bin/python3", "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        try:
            assert client.stdout is not None and client.stdout.readline() == b"connected\n"
            accepted, _ = server.accept()
            with accepted:
                local, remote = accepted.getsockname(), accepted.getpeername()
                nobody = owners.client_uid(local, remote)
                assert nobody not in (None, 0, os.geteuid())
                assert _uid_from_proc(local, remote) == nobody
                assert not PeerOwners().is_owner(local, remote)
        finally:
            client.kill()
            client.wait()
    owners.close()


def test_a_connection_that_is_gone_is_not_the_owners() -> None:
    owners = PeerOwners()
    assert not owners.is_owner(("127.0.0.1", 1), ("127.0.0.1", 2))
    owners.close()


def test_a_connection_its_client_closed_is_nobodys() -> None:
    """A client socket closed by its process (an orphan, then TIME_WAIT) is reported
    with uid 0 or no inode: taken for root, it let another user's request, sent and
    closed at once, in as the owner's. It is nobody's."""
    owners = PeerOwners()
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        with accepted:
            local, remote = accepted.getsockname(), accepted.getpeername()
            assert owners.client_uid(local, remote) == os.geteuid()  # open: found
            client.sendall(b"POST /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
            client.close()  # an orphan in FIN_WAIT2 now
            assert accepted.recv(100)  # (the request waits, as at an accept)
            assert owners.client_uid(local, remote) is None
            assert _uid_from_proc(local, remote) is None
            assert not owners.is_owner(local, remote)
    owners.close()


def test_the_owner_of_an_ipv6_loopback_connection_is_found() -> None:
    """An OAuth callback's listener on ``::1`` (a redirect_uri of ``[::1]`` or
    ``localhost``) asks about IPv6 connections: netlink and /proc/net/tcp6 both know them."""
    owners = PeerOwners()
    with (
        socket.create_server(("::1", 0), family=socket.AF_INET6) as server,
        socket.create_connection(server.getsockname()[:2]),
    ):
        accepted, _ = server.accept()
        with accepted:
            local, remote = accepted.getsockname()[:2], accepted.getpeername()[:2]
            assert owners.client_uid(local, remote) == os.geteuid()
            assert _uid_from_proc(local, remote) == os.geteuid()
    owners.close()
