"""Connection handoff: the shim's stream answer with the app's socket attached.

In sandbridge's own stream mode the host offers a handoff (:mod:`sandbridge.protocol.stream`);
a shim that takes it passes its connected TCP socket to the app over ``upstream.sock``
(``SCM_RIGHTS``) and the host speaks to the app directly, so a request crosses one
Python process instead of two.

The descriptor comes from the sandbox, which is hostile, so the host adopts it only
after checking that it is exactly what the shim would have relayed to: one descriptor,
a connected TCP stream socket whose peer is a loopback address of the registered sandbox
port (``127.0.0.1``, also IPv4-mapped, or ``::1``: :mod:`sandbridge.protocol.app_address`,
the addresses the shim connects to). Anything else (no descriptor, several, a truncated
control message, a pipe, a Unix socket, a listening socket, another port or address) is
refused and every descriptor that came with the answer is released; the caller turns
the refusal into a 502 for that request only.

Every descriptor is received, released and handed to a transport through
:mod:`sandbridge.aio.untrusted_fds`, so that none of them can block the event loop when
it is closed (a socket with ``SO_LINGER`` on and a full send queue).
"""

from __future__ import annotations

import os
import socket

from sandbridge.aio import event_loop, untrusted_fds
from sandbridge.exceptions import HandoffRefused
from sandbridge.protocol.app_address import peers
from sandbridge.protocol.jsonline import LineReader
from sandbridge.protocol.limits import MAX_STREAM_OPEN_BYTES

# Room for this many descriptors in one control message: the one expected plus a few,
# so that extra descriptors are received (and closed) rather than left to truncation;
# a control message with more sets MSG_CTRUNC, which is refused too.
FD_ROOM = 4
# The only peers an app socket may have, by its family: what the shim connects to.
LOOPBACK_PEERS: dict[int, frozenset[str]] = {
    family: peers(family) for family in (socket.AF_INET, socket.AF_INET6)
}


def close_all(fds: list[int]) -> None:
    """Release descriptors received from the shim that the host will not use."""
    untrusted_fds.release_all(fds)


async def read_answer(sock: socket.socket, fds: list[int]) -> tuple[bytes, bytes, bool]:
    """Read the shim's one-line answer from the non-blocking Unix socket ``sock``.

    Descriptors received with it are appended to ``fds`` (the caller owns and releases
    them, also on error). Returns the line, the bytes after it, and whether a control
    message was truncated.
    """
    lines = LineReader(MAX_STREAM_OPEN_BYTES)
    truncated = False
    line = None
    while line is None:
        try:
            data, cut = untrusted_fds.receive(sock, MAX_STREAM_OPEN_BYTES, FD_ROOM, fds)
        except BlockingIOError:
            await event_loop.ready(sock)
            continue
        truncated = truncated or cut
        line = lines.feed(data) if data else lines.feed_eof()
    return line, lines.rest, truncated


def adopt_app_socket(fds: list[int], truncated: bool, port: int) -> socket.socket:
    """Check what came with a handoff answer; return the app's socket, non-blocking.

    Takes ownership of ``fds``: on refusal every one of them is released. The socket
    returned is one the sandbox may still hold a copy of: give a transport
    :func:`untrusted_fds.for_transport` of it, never the socket itself.
    """
    if truncated or len(fds) != 1:
        count = len(fds)
        close_all(fds)
        reason = "a truncated control message" if truncated else f"{count} descriptors"
        raise HandoffRefused(f"shim handed over {reason}; exactly one socket is accepted")
    fd = fds.pop()
    try:
        # getsockopt, not fstat: fstat of a file on a sandbox-served FUSE mount could block.
        sock = socket.socket(fileno=fd)
    except OSError:
        untrusted_fds.release(fd, reset=True)
        raise HandoffRefused("shim handed over a descriptor that is not a socket") from None
    except BaseException:
        untrusted_fds.release(fd, reset=True)
        raise
    try:
        _check_app_socket(sock, port)
        os.set_inheritable(sock.fileno(), False)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError as exc:
        untrusted_fds.release_socket(sock, reset=True)
        if isinstance(exc, HandoffRefused):
            raise
        raise HandoffRefused(f"shim handed over an unusable socket: {exc.strerror}") from None
    except BaseException:
        untrusted_fds.release_socket(sock, reset=True)
        raise
    return sock


def _check_app_socket(sock: socket.socket, port: int) -> None:
    """The socket must be a connected TCP stream to ``<port>`` on an app address."""
    domain = sock.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN)
    if domain not in LOOPBACK_PEERS:
        raise HandoffRefused(f"shim handed over a socket of address family {domain}")
    if sock.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE) != socket.SOCK_STREAM:
        raise HandoffRefused("shim handed over a socket that is not a stream socket")
    if sock.getsockopt(socket.SOL_SOCKET, socket.SO_PROTOCOL) != socket.IPPROTO_TCP:
        raise HandoffRefused("shim handed over a socket that is not TCP")
    if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        raise HandoffRefused("shim handed over a listening socket")
    if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
        raise HandoffRefused("shim handed over a socket with a pending error")
    try:
        peer = sock.getpeername()
    except OSError:
        raise HandoffRefused("shim handed over a socket that is not connected") from None
    if peer[0] not in LOOPBACK_PEERS[domain] or peer[1] != port:
        raise HandoffRefused(
            f"shim handed over a socket connected to {peer[0]!s:.60} port {peer[1]}, "
            f"not 127.0.0.1 or ::1 port {port}"
        )
