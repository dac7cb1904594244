"""Whose is a loopback TCP connection? Only the owner's reach an app.

Threat: the app listeners bind loopback, but every local user can connect to loopback.
Another user holding ~1,000 idle connections to an app filled its connection limits,
and the owner's browser got 503s (a ``--private`` app too: the token is checked only
after a connection is counted). The trust table says other local users may do nothing.

Defence: TCP has no ``SO_PEERCRED``, but the kernel knows which uid owns the connecting
socket. At accept, :meth:`PeerOwners.is_owner` asks ``NETLINK_SOCK_DIAG`` (inet_diag)
for the exact 4-tuple of the client's socket and compares its ``idiag_uid`` with the
host's uid (or root's, which can read the owner's memory anyway); a connection from
another uid is closed at once, before it counts toward
any limit (no response: a refusal would cost a write and a linger for nothing). One
request and one answer on a netlink socket, a few microseconds per accept.

Failure: where netlink sock_diag is not available (no ``inet_diag`` module, a seccomp
filter), the uid is read from ``/proc/net/tcp`` instead (slower: a scan of every TCP
socket of the namespace). A connection whose owner cannot be found either way (it
closed already, or both are unavailable) is refused: the check fails closed.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct

from sandbridge import log
from sandbridge.protocol.sock_diag import (
    ALL_STATES,
    DIAG_REQUEST,
    NETLINK_SOCK_DIAG,
    NLM_F_REQUEST,
    NLMSG_ERROR,
    NLMSG_HEADER,
    NO_COOKIE,
    SOCK_DIAG_BY_FAMILY,
)

# inet_diag_msg: uid at this offset after the nlmsghdr (family..retrans, sockid (48),
# expires, rqueue, wqueue), then the inode.
UID_OFFSET = NLMSG_HEADER.size + 4 + 48 + 12
ANSWER_BYTES = 512
ROOT = 0


class PeerOwners:
    """Answers whether a loopback TCP connection's client belongs to this host's user."""

    def __init__(self, uid: int | None = None) -> None:
        self.uid = os.geteuid() if uid is None else uid
        self._sequence = 0
        self._netlink: socket.socket | None = None
        try:
            self._netlink = socket.socket(
                socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG
            )
        except OSError as exc:
            log.warning("peer_owner.netlink_unavailable", error=exc.strerror or str(exc))

    def close(self) -> None:
        if self._netlink is not None:
            self._netlink.close()
            self._netlink = None

    def is_owner(self, local: tuple[str, int], remote: tuple[str, int]) -> bool:
        """``local``/``remote``: the accepted socket's own and peer addresses (IPv4, or
        IPv6 for a listener on ``::1``)."""
        return self.client_uid(local, remote) in (self.uid, ROOT)

    def client_uid(self, local: tuple[str, int], remote: tuple[str, int]) -> int | None:
        """The uid owning the client socket (``remote`` -> ``local``), or ``None``."""
        if self._netlink is not None:
            try:
                return self._ask_netlink(local, remote)
            except OSError as exc:
                log.warning("peer_owner.netlink_failed", error=exc.strerror or str(exc))
                self.close()
        return _uid_from_proc(local, remote)

    def _ask_netlink(self, local: tuple[str, int], remote: tuple[str, int]) -> int | None:
        assert self._netlink is not None
        self._sequence = (self._sequence + 1) & 0xFFFFFFFF
        # The client's socket: its source is our remote end, its destination our local.
        body = _request_body(remote, local)
        header = NLMSG_HEADER.pack(
            NLMSG_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, self._sequence, 0
        )
        self._netlink.send(header + body)
        while True:
            # The kernel answers within send(): nothing waiting means no answer is coming.
            try:
                answer = self._netlink.recv(ANSWER_BYTES, socket.MSG_DONTWAIT)
            except BlockingIOError:
                log.warning("peer_owner.no_answer", sequence=self._sequence)
                return None
            _, kind, _, sequence, _ = NLMSG_HEADER.unpack_from(answer)
            if sequence != self._sequence:
                continue  # the answer to an earlier, abandoned question
            if kind == NLMSG_ERROR or len(answer) < UID_OFFSET + 8:
                return None  # no such socket (ENOENT): it is gone, or not on this host
            uid, inode = struct.unpack_from("=II", answer, UID_OFFSET)
            if inode == 0:
                # Its process closed it already: an orphan, or TIME_WAIT, which the
                # kernel reports as uid 0 (root, taken for the owner). Nobody's.
                return None
            return int(uid)


def _family(address: tuple[str, int]) -> int:
    """IPv6 for an address with a ``:`` (a listener on ``::1``: an OAuth callback's)."""
    return socket.AF_INET6 if ":" in address[0] else socket.AF_INET


def _request_body(source: tuple[str, int], destination: tuple[str, int]) -> bytes:
    family = _family(source)
    packed = DIAG_REQUEST.pack(
        family, socket.IPPROTO_TCP, 0, 0, ALL_STATES,
        socket.htons(source[1]), socket.htons(destination[1]),
        socket.inet_pton(family, source[0]).ljust(16, b"\0"),
        socket.inet_pton(family, destination[0]).ljust(16, b"\0"),
        0, NO_COOKIE, NO_COOKIE,
    )  # fmt: skip
    return packed


def _proc_address(address: tuple[str, int]) -> str:
    """``/proc/net/tcp``'s form: the address as little-endian hex words (one for IPv4,
    four for IPv6, as ``/proc/net/tcp6`` writes it), the port."""
    family = _family(address)
    packed = socket.inet_pton(family, address[0])
    words = struct.unpack(f"<{len(packed) // 4}I", packed)
    return "".join(f"{word:08X}" for word in words) + f":{address[1]:04X}"


def _uid_from_proc(local: tuple[str, int], remote: tuple[str, int]) -> int | None:
    wanted = (_proc_address(remote), _proc_address(local))
    table_path = "/proc/net/tcp6" if _family(local) == socket.AF_INET6 else "/proc/net/tcp"
    try:
        with open(table_path, encoding="ascii") as table:
            next(table)
            for row in table:
                fields = row.split()
                if (fields[1], fields[2]) == wanted:
                    return int(fields[7]) if int(fields[9]) != 0 else None  # (closed)
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return None


_shared: list[PeerOwners] = []
# Ports whose first refusal was logged: a flood is logged once per port, not once per
# connection (a line per connection would let another user fill the log, or block a
# host whose log pipe is not read).
_logged_ports: set[int] = set()


def shared_owners() -> PeerOwners:
    """The process's one :class:`PeerOwners` (its netlink socket), made on first use:
    listeners call it when they start, so the socket exists before any connection."""
    if not _shared:
        _shared.append(PeerOwners())
    return _shared[0]


def is_owners_connection(transport: asyncio.BaseTransport, port: int) -> bool:
    """The decision at accept on listener ``port``: does this loopback connection come
    from the owner (this process's uid, or root)? Fails closed: an unknown owner is not
    the owner."""
    return owners_peer(transport, port) is not None


def owners_peer(
    transport: asyncio.BaseTransport, port: int, local: tuple[str, int] | None = None
) -> tuple[str, int] | None:
    """:func:`is_owners_connection`, answered with the client's address (the owner's
    connection) or ``None`` (anyone else's, or unknown): what the listener goes on with.
    ``local``: the connection's own address where the listener knows it (it is bound to
    one address and port), which saves asking the kernel."""
    if local is None:
        local = transport.get_extra_info("sockname")
    remote = transport.get_extra_info("peername")
    owners = shared_owners()
    uid = None
    if isinstance(local, tuple) and isinstance(remote, tuple):
        uid = owners.client_uid(local[:2], remote[:2])
        if uid in (owners.uid, ROOT):
            return remote[0], remote[1]
    if port not in _logged_ports:
        _logged_ports.add(port)
        log.warning("connection.other_user_refused", port=port, uid=uid)
    return None
