"""First step of an ``allow``-mode sandbox: give its network namespace the gate address.

Runs as root of a user namespace that ``unshare --user --map-root-user --net`` made for
this purpose, so it owns the new network namespace: it brings loopback up, adds the
gate address to it and lets unprivileged ports start at 0 (so a host service on port
80 can have its gate port). Then it execs the backend, which nests the sandbox's own
user namespace inside this one. Capabilities over a network namespace belong to the
user namespace that owns it and its ancestors only, so nothing inside the sandbox (not
even its root) can change addresses, routes or interfaces: the command never holds
``CAP_NET_ADMIN`` over the network it uses.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import sys

from sandbridge.sandbox.unshare_init import loopback_up

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


def add_address(interface: str, address: ipaddress.IPv4Address) -> None:
    """Add ``address``/32 to ``interface`` with one rtnetlink request."""
    index = socket.if_nametoindex(interface)
    attributes = b"".join(
        struct.pack("HH", 8, kind) + address.packed for kind in (IFA_LOCAL, IFA_ADDRESS)
    )
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
        add_address("lo", ipaddress.IPv4Address(args[0]))
        with open(UNPRIVILEGED_PORT_START, "w") as file:
            file.write("0")
    except OSError as exc:
        print(f"sandbridge: cannot set up the sandbox network: {exc}", file=sys.stderr)
        sys.exit(126)
    command = args[2:]
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
