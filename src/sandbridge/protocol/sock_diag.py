"""The layouts of Linux's ``NETLINK_SOCK_DIAG`` (inet_diag) messages: what the relay
asks the kernel about a TCP socket's owner (``relay/host/local_peer.py``) and the sandbox
about its listening sockets (``relay/inside/listening_ports.py``).

Kept apart from both so that the sandbox entry, which scans its listeners without an
event loop, imports these few structures and nothing of the relay's asyncio side.
"""

from __future__ import annotations

import struct

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
# nlmsghdr: length, type, flags, sequence, port id.
NLMSG_HEADER = struct.Struct("=IHHII")
# inet_diag_req_v2: family, protocol, ext, pad, states, then inet_diag_sockid: source
# and destination ports (big-endian), source and destination addresses (4 x 32 bits),
# interface, cookie (two 32-bit words; all ones: look the socket up by address).
DIAG_REQUEST = struct.Struct("=BBBBIHH16s16sIII")
ALL_STATES = 0xFFFFFFFF
NO_COOKIE = 0xFFFFFFFF
