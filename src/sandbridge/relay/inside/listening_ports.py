"""The TCP ports the sandbox listens on (for auto-publish).

The kernel is asked with ``NETLINK_SOCK_DIAG`` (inet_diag, as ``ss -ltn`` does) for the
listening TCP sockets of the caller's network namespace: inside a sandbox with its own
network (``net none`` or ``allow``), exactly the sandbox's. Asked for listeners only,
the kernel walks its listening table alone, so a scan costs the same however many
connections the machine holds. Where sock_diag is unavailable (no ``inet_diag``, a
seccomp filter), ``/proc/net/tcp`` and ``tcp6`` are read instead; the kernel lists
listening sockets first there (its iterator walks the listening hash before the
established one, which since Linux 4.4 also holds half-open requests), so a read stops
at the first line in another state, but the kernel fills its page by walking its
connection table, every namespace's (docs/network.md says what that costs).

A port counts when the relay can reach it, that is on a loopback address it connects to
(:mod:`sandbridge.protocol.app_address`): a listener on ``0.0.0.0``, ``127.0.0.1``,
``::``, ``::ffff:127.0.0.1`` or ``::1`` (where Node puts ``localhost`` when
``/etc/hosts`` lists ``::1 localhost`` first). :attr:`Listener.address` says which, so
that messages name the address actually found. Who listens is found, only when asked,
by matching the socket's inode against ``/proc/*/fd`` (readable for the sandbox's own
processes); else ``unknown``.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from sandbridge.protocol.sandbox_requests import process_name
from sandbridge.protocol.sock_diag import (
    DIAG_REQUEST,
    NETLINK_SOCK_DIAG,
    NLM_F_REQUEST,
    NLMSG_ERROR,
    NLMSG_HEADER,
    NO_COOKIE,
    SOCK_DIAG_BY_FAMILY,
)

PROC = Path("/proc")
_LISTEN = "0A"
# Listening sockets read per table: far more than any dev setup opens, small enough
# that a sandbox that opens thousands cannot make a scan expensive.
MAX_LISTENERS = 4096
# Descriptors inspected per owner search: every process of a busy sandbox, bounded.
MAX_FDS_SCANNED = 65536

# The local addresses (network order) at which the relay reaches a listener, with how
# each is written, in the order one is preferred when a port has several (one app, both
# families): the 127.0.0.1 ones first, where the relay connects first.
_REACHABLE: dict[bytes, str] = {
    bytes([127, 0, 0, 1]): "127.0.0.1",
    bytes(4): "0.0.0.0",
    bytes(10) + b"\xff\xff" + bytes([127, 0, 0, 1]): "::ffff:127.0.0.1",
    bytes(10) + b"\xff\xff" + bytes(4): "::ffff:0.0.0.0",
    bytes(16): "::",
    bytes(15) + b"\x01": "::1",
}
_PREFERENCE = {name: rank for rank, name in enumerate(_REACHABLE.values())}

NLM_F_DUMP = 0x300
NLMSG_DONE = 3
TCPF_LISTEN = 1 << 10
# inet_diag_msg: family, state, timer, retransmits; the socket id (source and
# destination ports big-endian, addresses, interface, cookie); expires, receive and
# send queues, uid, inode.
DIAG_MESSAGE = struct.Struct("=BBBB2s2s16s16sI8sIIIII")
# The kernel answers a dump at once; a second without a message means it will not.
NETLINK_TIMEOUT = 1.0


class Listener(NamedTuple):
    """A listening TCP socket of the sandbox (a NamedTuple: the sandbox entry, which
    scans without an event loop, never imports ``dataclasses``)."""

    port: int
    inode: int
    address: str  # where it listens: 127.0.0.1, 0.0.0.0, ::, ::1 (or IPv4-mapped)


def _address(hex_text: str) -> bytes | None:
    """The address in network order: /proc prints each 4-byte word as a host-order
    integer (``0100007F`` is 127.0.0.1 on a little-endian machine)."""
    try:
        raw = bytes.fromhex(hex_text)
    except ValueError:
        return None
    if len(raw) not in (4, 16):
        return None
    return b"".join(
        int.from_bytes(raw[i : i + 4], "big").to_bytes(4, sys.byteorder)
        for i in range(0, len(raw), 4)
    )


def parse_table(lines: Iterable[str]) -> Iterator[Listener]:
    """The listening sockets of one ``/proc/net/tcp{,6}`` table (header line included),
    stopping at the first socket in another state; malformed lines are skipped."""
    count = 0
    for line in lines:
        fields = line.split()
        if len(fields) < 10 or not fields[0].endswith(":"):
            continue  # the header, or not a socket line
        if fields[3] != _LISTEN:
            return
        address_hex, _, port_hex = fields[1].partition(":")
        address = _address(address_hex)
        try:
            port, inode = int(port_hex, 16), int(fields[9])
        except ValueError:
            continue
        if address is None or not 1 <= port <= 65535:
            continue
        listener = _listener(port, address, inode)
        if listener is not None:
            yield listener
        count += 1
        if count >= MAX_LISTENERS:
            return


def _listener(port: int, address: bytes, inode: int) -> Listener | None:
    """A listener the relay reaches, or ``None`` (another address: the gate address in
    allow mode, 127.0.0.2, a private address)."""
    name = _REACHABLE.get(address)
    return None if name is None else Listener(port, inode, name)


def from_proc(proc: Path = PROC) -> list[Listener]:
    """The listeners of ``/proc/net/tcp`` and ``tcp6`` (the fallback)."""
    found: list[Listener] = []
    for table in ("tcp", "tcp6"):
        try:
            with open(proc / "net" / table, encoding="ascii", errors="replace") as file:
                found += parse_table(file)
        except OSError:
            continue  # no IPv6 in this kernel, or no /proc: nothing listens there
    return found


def from_netlink() -> list[Listener] | None:
    """The listeners sock_diag reports, or ``None`` where it cannot be asked."""
    try:
        sock = socket.socket(
            socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG
        )
    except OSError:
        return None
    found: list[Listener] = []
    with sock:
        sock.settimeout(NETLINK_TIMEOUT)
        for sequence, family in enumerate((socket.AF_INET, socket.AF_INET6), start=1):
            body = DIAG_REQUEST.pack(
                family, socket.IPPROTO_TCP, 0, 0, TCPF_LISTEN, 0, 0,
                bytes(16), bytes(16), 0, NO_COOKIE, NO_COOKIE,
            )  # fmt: skip
            header = NLMSG_HEADER.pack(
                NLMSG_HEADER.size + len(body),
                SOCK_DIAG_BY_FAMILY,
                NLM_F_REQUEST | NLM_F_DUMP,
                sequence,
                0,
            )
            try:
                sock.send(header + body)
                if not _read_dump(sock, family, found):
                    return None
            except OSError:
                return None
    return found


def _read_dump(sock: socket.socket, family: int, found: list[Listener]) -> bool:
    """Collect one dump's listeners into ``found``; False if the kernel refused it."""
    count = 0
    while True:
        data = sock.recv(65536)
        offset = 0
        while offset + NLMSG_HEADER.size <= len(data):
            length, kind, _, _, _ = NLMSG_HEADER.unpack_from(data, offset)
            if kind == NLMSG_DONE:
                return True
            if kind == NLMSG_ERROR or length < NLMSG_HEADER.size:
                return False
            start = offset + NLMSG_HEADER.size
            if kind == SOCK_DIAG_BY_FAMILY and length >= NLMSG_HEADER.size + DIAG_MESSAGE.size:
                message = DIAG_MESSAGE.unpack_from(data, start)
                port = int.from_bytes(message[4], "big")
                address = message[6][: 4 if family == socket.AF_INET else 16]
                listener = _listener(port, address, message[-1])
                if listener is not None and count < MAX_LISTENERS:
                    found.append(listener)
                count += 1
            offset += (length + 3) & ~3  # messages are 4-byte aligned


def listening_ports(proc: Path = PROC) -> dict[int, Listener]:
    """The sandbox's listening ports by number (sock_diag, else ``proc``'s tables); of
    several sockets on one port (one app, both address families) the one the relay
    connects to first is reported."""
    listeners = from_netlink()
    if listeners is None:
        listeners = from_proc(proc)
    found: dict[int, Listener] = {}
    for listener in listeners:
        held = found.get(listener.port)
        if held is None or _PREFERENCE[listener.address] < _PREFERENCE[held.address]:
            found[listener.port] = listener
    return found


def owners(inodes: set[int], proc: Path = PROC) -> dict[int, str]:
    """The process name (``/proc/PID/comm``) holding each socket inode, where readable;
    inodes not found are absent (the caller says ``unknown``)."""
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    found: dict[int, str] = {}
    scanned = 0
    try:
        with os.scandir(proc) as entries:
            pids = [entry for entry in entries if entry.name.isdigit()]
    except OSError:
        return found
    for pid in pids:
        try:
            for target in _socket_links(pid.path):
                scanned += 1
                inode = wanted.get(target)
                if inode is not None and inode not in found:
                    name = _comm(pid.path)
                    if name is not None:  # (else exiting or in an exec: not found yet)
                        found[inode] = name
                if scanned >= MAX_FDS_SCANNED:
                    return found
        except OSError:
            continue  # another user's process, or one that ended meanwhile
        if len(found) == len(wanted):
            break
    return found


def _socket_links(pid_path: str) -> Iterator[str]:
    """What each descriptor of the process points to (``socket:[inode]`` for a socket)."""
    with os.scandir(os.path.join(pid_path, "fd")) as fds:
        for fd in fds:
            try:
                yield os.readlink(fd.path)
            except OSError:
                continue  # closed meanwhile


def _comm(pid_path: str) -> str | None:
    """The process's name, or None if its ``comm`` cannot be read now."""
    try:
        with open(os.path.join(pid_path, "comm"), "rb") as file:
            raw = file.read(256)
    except OSError:
        return None
    return process_name(raw.decode("utf-8", "replace"))
