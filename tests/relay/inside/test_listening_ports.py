"""The listening sockets auto-publish sees: /proc's tables parsed, and real sockets found."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.relay.inside.listening_ports import (
    MAX_LISTENERS,
    Listener,
    from_netlink,
    from_proc,
    listening_ports,
    owners,
    parse_table,
)
from tests.support.loopback_ports import bound_only, on_ipv6_loopback_and

V4_HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"  # noqa: E501


def hex_v4(address: bytes) -> str:
    """How /proc writes an IPv4 address: one host-order integer in hex."""
    return f"{int.from_bytes(address, sys.byteorder):08X}"


def hex_v6(address: bytes) -> str:
    return "".join(hex_v4(address[i : i + 4]) for i in range(0, 16, 4))


def line(number: int, local: str, port: int, state: str, inode: int) -> str:
    return (
        f"   {number}: {local}:{port:04X} 00000000:0000 {state} 00000000:00000000 "
        f"00:00000000 00000000     0        0 {inode} 1 0000000000000000 100 0 0 10 0"
    )


LOOPBACK = bytes([127, 0, 0, 1])
ANY = bytes(4)


def test_listeners_on_loopback_and_any_address_count() -> None:
    table = [
        V4_HEADER,
        line(0, hex_v4(LOOPBACK), 5173, "0A", 101),
        line(1, hex_v4(ANY), 8000, "0A", 102),
    ]
    assert list(parse_table(table)) == [
        Listener(5173, 101, "127.0.0.1"),
        Listener(8000, 102, "0.0.0.0"),
    ]


def test_listeners_on_other_addresses_do_not_count() -> None:
    # the gate address (allow mode), another loopback address, a private address
    table = [
        V4_HEADER,
        line(0, hex_v4(bytes([100, 64, 0, 1])), 18081, "0A", 1),
        line(1, hex_v4(bytes([127, 0, 0, 2])), 3000, "0A", 2),
        line(2, hex_v4(bytes([10, 0, 0, 5])), 3001, "0A", 3),
    ]
    assert list(parse_table(table)) == []


def test_the_scan_stops_at_the_first_socket_that_does_not_listen() -> None:
    table = [
        V4_HEADER,
        line(0, hex_v4(LOOPBACK), 5173, "0A", 1),
        line(1, hex_v4(LOOPBACK), 40000, "01", 2),  # established: listeners came first
        line(2, hex_v4(LOOPBACK), 5174, "0A", 3),
    ]
    assert [listener.port for listener in parse_table(table)] == [5173]


def test_ipv6_any_mapped_loopback_and_loopback_count_each_named() -> None:
    table = [
        "header",
        line(0, hex_v6(bytes(16)), 3000, "0A", 1),
        line(1, hex_v6(bytes(10) + b"\xff\xff" + LOOPBACK), 3001, "0A", 2),
        line(2, hex_v6(bytes(15) + b"\x01"), 3002, "0A", 3),
    ]
    assert list(parse_table(table)) == [
        Listener(3000, 1, "::"),
        Listener(3001, 2, "::ffff:127.0.0.1"),
        Listener(3002, 3, "::1"),
    ]


def test_other_ipv6_addresses_do_not_count() -> None:
    table = [
        "header",
        line(0, hex_v6(bytes(15) + b"\x02"), 3000, "0A", 1),  # ::2
        line(1, hex_v6(bytes([0xFE, 0x80]) + bytes(13) + b"\x01"), 3001, "0A", 2),  # fe80::1
    ]
    assert list(parse_table(table)) == []


@pytest.mark.parametrize(
    "bad",
    [
        "   0: zz00007F:1435 00000000:0000 0A 0 0 0 0 0 5 1",
        "   0: 0100007F:zz 00000000:0000 0A 0 0 0 0 0 5 1",
        "   0: 0100007F:0000 00000000:0000 0A 0 0 0 0 0 5 1",  # port 0
        "   0: 0100007F:1435 00000000:0000 0A 0 0 0 0 0 notanumber 1",
        "   0: 01007F:1435 00000000:0000 0A 0 0 0 0 0 5 1",  # 3-byte address
        "   0: 0100007F:1435",
        "garbage",
        "",
    ],
)
def test_malformed_lines_are_skipped(bad: str) -> None:
    good = line(1, hex_v4(LOOPBACK), 5173, "0A", 9)
    assert list(parse_table([V4_HEADER, bad, good])) == [Listener(5173, 9, "127.0.0.1")]


def test_a_table_is_read_up_to_the_listener_limit() -> None:
    table = (line(n, hex_v4(LOOPBACK), 1 + n, "0A", n) for n in range(MAX_LISTENERS + 10))
    assert len(list(parse_table(table))) == MAX_LISTENERS


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


def test_a_real_listener_is_found_with_this_process_as_its_owner(
    listening: socket.socket,
) -> None:
    port = listening.getsockname()[1]
    found = listening_ports()
    assert found[port].address == "127.0.0.1"
    own_name = Path("/proc/self/comm").read_text().strip()
    assert owners({found[port].inode}) == {found[port].inode: own_name}


def test_a_closed_listener_is_gone() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert port in listening_ports()
    assert port not in listening_ports()


def test_a_connected_socket_is_not_a_listener(listening: socket.socket) -> None:
    with socket.create_connection(listening.getsockname()) as client:
        assert client.getsockname()[1] not in listening_ports()


def test_an_inode_nobody_holds_has_no_owner() -> None:
    assert owners({1}) == {}


def test_without_proc_nothing_listens(tmp_path: Path) -> None:
    assert from_proc(tmp_path) == []
    assert owners({1}, tmp_path) == {}


def test_netlink_and_proc_see_the_same_listeners(listening: socket.socket) -> None:
    with socket.socket(socket.AF_INET6) as v6_only:
        v6_only.bind(("::1", 0))  # the test machines have IPv6 loopback: none is a failure
        v6_only.listen()
        ours = {(listening.getsockname()[1], "127.0.0.1"), (v6_only.getsockname()[1], "::1")}
        netlink = from_netlink()
        assert netlink is not None, "sock_diag is available on the test machines"
        # Only this test's sockets, by port and address: other processes may come and go
        # meanwhile, on these port numbers too (on the other loopback address).
        by_netlink = {(x.port, x.address): x.inode for x in netlink if (x.port, x.address) in ours}
        by_proc = {(x.port, x.address): x.inode for x in from_proc() if (x.port, x.address) in ours}
        assert by_netlink == by_proc
        assert by_netlink.keys() == ours


def test_a_port_on_both_loopbacks_is_reported_where_the_relay_connects_first() -> None:
    v6, v4 = on_ipv6_loopback_and(lambda port: socket.create_server(("127.0.0.1", port)))
    with v6, v4:
        assert listening_ports()[v4.getsockname()[1]].address == "127.0.0.1"


def test_a_listener_on_ipv6_loopback_only_is_found_and_named() -> None:
    v6, held = on_ipv6_loopback_and(bound_only)
    with v6, held:
        assert listening_ports()[v6.getsockname()[1]].address == "::1"


def test_a_holder_whose_name_cannot_be_read_now_is_not_found_yet(tmp_path: Path) -> None:
    """A process exiting or in an exec holds the socket but has no readable ``comm``: the
    socket's owner is not found (auto-publish looks again), rather than named unknown."""
    (tmp_path / "42" / "fd").mkdir(parents=True)
    os.symlink("socket:[777]", tmp_path / "42" / "fd" / "3")
    assert owners({777}, tmp_path) == {}
    (tmp_path / "42" / "comm").write_text("vite\n")
    assert owners({777}, tmp_path) == {777: "vite"}
