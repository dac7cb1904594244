"""What the host accepts as the app's socket, checked on real descriptors."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from sandbridge.aio import untrusted_fds
from sandbridge.exceptions import HandoffRefused
from sandbridge.relay.host.handoff import adopt_app_socket


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


def port_of(sock: socket.socket) -> int:
    port: int = sock.getsockname()[1]
    return port


def is_open(fd: int) -> bool:
    """Whether ``fd`` is still open once the closer threads have done their work."""
    assert untrusted_fds.settle()
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_connected_tcp_socket_to_the_registered_port_is_adopted(listener: socket.socket) -> None:
    client = socket.create_connection(("127.0.0.1", port_of(listener)))
    adopted = adopt_app_socket([client.detach()], False, port_of(listener))
    with adopted:
        assert not adopted.getblocking()
        assert not os.get_inheritable(adopted.fileno())
        assert adopted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def test_socket_to_another_port_is_refused_and_closed(listener: socket.socket) -> None:
    fd = socket.create_connection(("127.0.0.1", port_of(listener))).detach()
    with pytest.raises(HandoffRefused, match=r"not 127\.0\.0\.1 or ::1 port"):
        adopt_app_socket([fd], False, port_of(listener) + 1)
    assert not is_open(fd)


def test_unconnected_tcp_socket_is_refused() -> None:
    fd = socket.socket(socket.AF_INET, socket.SOCK_STREAM).detach()
    with pytest.raises(HandoffRefused, match="not connected"):
        adopt_app_socket([fd], False, 80)
    assert not is_open(fd)


def test_listening_socket_is_refused(listener: socket.socket) -> None:
    fd = os.dup(listener.fileno())
    with pytest.raises(HandoffRefused, match="listening"):
        adopt_app_socket([fd], False, port_of(listener))
    assert not is_open(fd)


def test_ipv6_loopback_on_the_registered_port_is_adopted() -> None:
    """Where an app listens on ``::1`` only (Node's ``localhost``), the shim connects there."""
    with socket.create_server(("::1", 0), family=socket.AF_INET6) as server:
        client = socket.create_connection(("::1", port_of(server)))
        with adopt_app_socket([client.detach()], False, port_of(server)) as adopted:
            assert adopted.getpeername()[:2] == ("::1", port_of(server))


def test_ipv4_mapped_loopback_on_the_registered_port_is_adopted(listener: socket.socket) -> None:
    client = socket.socket(socket.AF_INET6)
    client.connect(("::ffff:127.0.0.1", port_of(listener)))
    with adopt_app_socket([client.detach()], False, port_of(listener)) as adopted:
        assert adopted.getpeername()[0] == "::ffff:127.0.0.1"


def test_another_loopback_address_on_the_registered_port_is_refused_and_closed() -> None:
    with socket.create_server(("127.0.0.2", 0)) as server:
        fd = socket.create_connection(("127.0.0.2", port_of(server))).detach()
        with pytest.raises(HandoffRefused, match=r"connected to 127\.0\.0\.2 port"):
            adopt_app_socket([fd], False, port_of(server))
        assert not is_open(fd)


def test_pipe_is_refused_and_closed() -> None:
    read_end, write_end = os.pipe()
    os.close(write_end)
    with pytest.raises(HandoffRefused, match="not a socket"):
        adopt_app_socket([read_end], False, 80)
    assert not is_open(read_end)


def test_unix_socket_is_refused() -> None:
    ours, theirs = socket.socketpair()
    with ours:
        fd = theirs.detach()
        with pytest.raises(HandoffRefused, match="address family"):
            adopt_app_socket([fd], False, 80)
        assert not is_open(fd)


def test_udp_socket_is_refused(listener: socket.socket) -> None:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.connect(("127.0.0.1", port_of(listener)))
    fd = udp.detach()
    with pytest.raises(HandoffRefused, match="not a stream socket"):
        adopt_app_socket([fd], False, port_of(listener))
    assert not is_open(fd)


def test_more_than_one_descriptor_is_refused_and_all_are_closed(listener: socket.socket) -> None:
    fds = [socket.create_connection(("127.0.0.1", port_of(listener))).detach() for _ in range(2)]
    with pytest.raises(HandoffRefused, match="2 descriptors"):
        adopt_app_socket(list(fds), False, port_of(listener))
    assert not any(is_open(fd) for fd in fds)


def test_no_descriptor_is_refused() -> None:
    with pytest.raises(HandoffRefused, match="0 descriptors"):
        adopt_app_socket([], False, 80)


def test_truncated_control_message_is_refused_and_what_arrived_is_closed(
    listener: socket.socket,
) -> None:
    fd = socket.create_connection(("127.0.0.1", port_of(listener))).detach()
    with pytest.raises(HandoffRefused, match="truncated"):
        adopt_app_socket([fd], True, port_of(listener))
    assert not is_open(fd)
