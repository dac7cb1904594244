"""The TCP ports the sandbox listens on, read from its ``/proc`` (for auto-publish).

``/proc/net/tcp`` and ``/proc/net/tcp6`` list the sockets of the reading process's
network namespace: inside a sandbox with its own network (``net none`` or ``allow``),
exactly the sandbox's. The kernel lists listening sockets first (its iterator walks
the listening hash before the established one, which since Linux 4.4 also holds
half-open requests), so a read stops at the first line in another state: a scan costs
a few lines however many connections are open.

A port counts when the shim can reach it, that is on ``127.0.0.1``: a listener on
``0.0.0.0``, ``127.0.0.1``, ``::`` or ``::ffff:127.0.0.1``. One on ``::1`` only is
reported apart (:attr:`Listener.reachable` false) so auto-publish can say why it is not
published. Who listens is found, only when asked, by matching the socket's inode
against ``/proc/*/fd`` (readable for the sandbox's own processes); else ``unknown``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sandbridge.protocol.auto_registration import UNKNOWN_PROCESS, process_name

PROC = Path("/proc")
_LISTEN = "0A"
# Listening sockets read per table: far more than any dev setup opens, small enough
# that a sandbox that opens thousands cannot make a scan expensive.
MAX_LISTENERS = 4096
# Descriptors inspected per owner search: every process of a busy sandbox, bounded.
MAX_FDS_SCANNED = 65536

# Local addresses as /proc writes them (each 32-bit word in host byte order), for the
# addresses from which 127.0.0.1 reaches the socket.
_V4_REACHABLE = {
    bytes(4),  # 0.0.0.0
    bytes([127, 0, 0, 1]),
}
_V6_REACHABLE = {
    bytes(16),  # ::
    bytes(10) + b"\xff\xff" + bytes([127, 0, 0, 1]),  # ::ffff:127.0.0.1
    bytes(10) + b"\xff\xff" + bytes(4),  # ::ffff:0.0.0.0
}
_V6_LOOPBACK = bytes(15) + b"\x01"


@dataclass(frozen=True, slots=True)
class Listener:
    """A listening TCP socket of the sandbox."""

    port: int
    inode: int
    reachable: bool  # False: bound to ::1 only, which the shim (127.0.0.1) cannot reach


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
        if address in _V4_REACHABLE or address in _V6_REACHABLE:
            yield Listener(port, inode, reachable=True)
        elif address == _V6_LOOPBACK:
            yield Listener(port, inode, reachable=False)
        count += 1
        if count >= MAX_LISTENERS:
            return


def listening_ports(proc: Path = PROC) -> dict[int, Listener]:
    """The sandbox's listening ports by number; a reachable socket wins over a ``::1``
    one on the same port (one app, both address families)."""
    found: dict[int, Listener] = {}
    for table in ("tcp", "tcp6"):
        try:
            with open(proc / "net" / table, encoding="ascii", errors="replace") as file:
                for listener in parse_table(file):
                    if listener.port not in found or listener.reachable:
                        found[listener.port] = listener
        except OSError:
            continue  # no IPv6 in this kernel, or no /proc: nothing listens there
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
                    found[inode] = _comm(pid.path)
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


def _comm(pid_path: str) -> str:
    try:
        with open(os.path.join(pid_path, "comm"), "rb") as file:
            raw = file.read(256)
    except OSError:
        return UNKNOWN_PROCESS
    return process_name(raw.decode("utf-8", "replace"))
