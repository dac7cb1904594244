"""The sandbridge shim's side of stream mode, spoken to over its real socket: it hands
the app's socket over when the host offers a handoff, and relays otherwise."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from sandbridge.protocol import stream
from tests.conftest import Relay, echo, host_port_of, module_relay


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relay]:
    """One relay for the module: each test registers apps of its own."""
    with module_relay(tmp_path_factory) as relay:
        yield relay


@pytest.fixture(scope="module")
def app_port(shared_app_port: int) -> int:
    return shared_app_port


def _open(relay: Relay, opening: bytes) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(relay.runtime_dir / "upstream.sock"))
    sock.sendall(opening)
    return sock


def _status_line(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n" not in data and (chunk := sock.recv(4096)):
        data += chunk
    return data.split(b"\r\n")[0]


def test_shim_hands_over_a_socket_connected_to_the_app(relay: Relay, app_port: int) -> None:
    with _open(relay, stream.encode_open(app_port, handoff=True)) as sock:
        line, fds, _, _ = socket.recv_fds(sock, 4096, 4)
        assert json.loads(line) == {"ok": True, "stream": 1, "handoff": 1}
        assert len(fds) == 1
        assert sock.recv(1) == b""  # the shim's part is over
    with socket.socket(fileno=fds[0]) as app:
        assert app.getpeername() == ("127.0.0.1", app_port)
        app.settimeout(10)
        app.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert _status_line(app).startswith(b"HTTP/1.1 200")


def test_shim_relays_for_a_host_that_offers_no_handoff(relay: Relay, app_port: int) -> None:
    with _open(relay, stream.encode_open(app_port)) as sock:
        line, fds, _, _ = socket.recv_fds(sock, 4096, 4)
        assert json.loads(line) == {"ok": True, "stream": 1}
        assert fds == []
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert _status_line(sock).startswith(b"HTTP/1.1 200")


def test_shim_reports_an_unreachable_app_without_a_descriptor(relay: Relay) -> None:
    with _open(relay, stream.encode_open(1, handoff=True)) as sock:
        line, fds, _, _ = socket.recv_fds(sock, 4096, 4)
        assert fds == []
        ack = stream.decode_ack(line.split(b"\n")[0])
        assert ack.ok is False
        assert ack.error == (
            "connect to 127.0.0.1:1 failed: [Errno 111] Connection refused; "
            "connect to [::1]:1 failed: [Errno 111] Connection refused"
        )


def test_shim_hands_over_a_socket_to_an_app_on_any_loopback_address(
    relay: Relay, loopback_app: tuple[str, int]
) -> None:
    bound, port = loopback_app
    with _open(relay, stream.encode_open(port, handoff=True)) as sock:
        line, fds, _, _ = socket.recv_fds(sock, 4096, 4)
        assert json.loads(line) == {"ok": True, "stream": 1, "handoff": 1}, bound
    with socket.socket(fileno=fds[0]) as app:
        # 127.0.0.1 first; ::1 only where the app takes no IPv4
        expected = "::1" if bound in ("::1 only", ":: IPv6 only") else "127.0.0.1"
        assert app.getpeername()[:2] == (expected, port)
        app.settimeout(10)
        app.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert _status_line(app).startswith(b"HTTP/1.1 200")


def test_shim_relays_to_an_app_on_any_loopback_address(
    relay: Relay, loopback_app: tuple[str, int]
) -> None:
    with _open(relay, stream.encode_open(loopback_app[1])) as sock:
        line, _, _, _ = socket.recv_fds(sock, 4096, 4)
        assert json.loads(line) == {"ok": True, "stream": 1}
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert _status_line(sock).startswith(b"HTTP/1.1 200")


def test_a_registered_app_on_any_loopback_address_is_served_through_the_relay(
    relay: Relay, loopback_app: tuple[str, int]
) -> None:
    """Registration (``ags-webview-url``), the host's handoff check, the shim's connect."""
    url = relay.register(loopback_app[1])
    assert echo(host_port_of(url), "/through")["path"] == "/through"
