"""First step of an ``allow``-mode sandbox: give its network namespace the gate address.

Runs as root of a user namespace that ``unshare --user --map-root-user --net`` made for
this purpose, so it owns the new network namespace: it brings loopback up, adds the
gate address to it and lets unprivileged ports start at 0 (so a host service on port
80 can have its gate port). Then it execs the backend, which nests the sandbox's own
user namespace inside this one. Capabilities over a network namespace belong to the
user namespace that owns it and its ancestors only, so nothing inside the sandbox (not
even its root) can change addresses, routes or interfaces: the command never holds
``CAP_NET_ADMIN`` over the network it uses.

It starts with every ``allow``-mode session, so it imports only what it uses (no
``ipaddress``, not :mod:`sandbridge.sandbox.unshare_init`, which takes its
:func:`loopback_up` from here).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import struct
import sys

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
RTM_NEWADDR = 20
NLMSG_ERROR = 2
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
IFA_ADDRESS = 1
IFA_LOCAL = 2
RT_SCOPE_UNIVERSE = 0
UNPRIVILEGED_PORT_START = "/proc/sys/net/ipv4/ip_unprivileged_port_start"


def loopback_up() -> None:
    """Bring this network namespace's loopback interface up."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def add_address(interface: str, address: str) -> None:
    """Add ``address`` (an IPv4 address in dotted-quad form, else ``OSError`` naming it)/32
    to ``interface`` with one rtnetlink request."""
    try:
        packed = socket.inet_pton(socket.AF_INET, address)
    except (OSError, ValueError):  # (ValueError: a NUL or a lone surrogate in it)
        raise OSError(
            errno.EINVAL, f"the gate address {address!r} is not a dotted-quad IPv4 address"
        ) from None
    index = socket.if_nametoindex(interface)
    attributes = b"".join(struct.pack("HH", 8, kind) + packed for kind in (IFA_LOCAL, IFA_ADDRESS))
    body = struct.pack("BBBBI", socket.AF_INET, 32, 0, RT_SCOPE_UNIVERSE, index) + attributes
    flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE
    header = struct.pack("IHHII", 16 + len(body), RTM_NEWADDR, flags, 1, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        sock.send(header + body)
        reply = sock.recv(4096)
    if struct.unpack_from("H", reply, 4)[0] == NLMSG_ERROR:
        error = -struct.unpack_from("i", reply, 16)[0]
        if error:
            raise OSError(error, f"add {address} to {interface}: {os.strerror(error)}")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m sandbridge.sandbox.net_init GATE -- COMMAND...", file=sys.stderr)
        sys.exit(2)
    try:
        loopback_up()
        add_address("lo", args[0])
        with open(UNPRIVILEGED_PORT_START, "w") as file:
            file.write("0")
    except OSError as exc:
        print(f"sandbridge: cannot set up the sandbox network: {exc}", file=sys.stderr)
        sys.exit(126)
    command = args[2:]
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
