"""The socket minter: a host process in the sandbox's network namespace that makes TCP
sockets for the host and nothing else.

Why: an app connection handed over by the shim (:mod:`.handoff`) is a file the sandbox
can keep a copy of, and ``O_NONBLOCK`` is a flag of that file: a sandbox that clears it
makes uvloop's ``write()`` to an app that reads nothing block the host's whole event
loop. A socket keeps the network namespace it was created in, so a socket made in the
sandbox's namespace by a process the sandbox cannot reach, and connected by the host
itself, reaches the app exactly as the shim's would, and no sandbox process ever holds
it.

This process is started by the host (:mod:`.owned_upstream`) through ``nsenter``: it
enters the user namespace that owns the sandbox's network namespace, then that network
namespace, and stays in the host's PID and mount namespaces, where no sandbox process
can see, signal or trace it (it is also made non-dumpable and drops every capability
that the user namespace gave it). On its one descriptor, a ``SOCK_SEQPACKET`` socket
whose other end the host holds, each message of one byte ``N`` (1 to :data:`MAX_BATCH`)
asks for ``N`` new, unconnected TCP sockets (:func:`app_socket`: dual-stack IPv6, which
reach an app on ``127.0.0.1`` and on ``::1`` alike); they come back in one message
(``SCM_RIGHTS``). It never receives descriptors, and it exits when the host's end
closes (or the host dies: ``PR_SET_PDEATHSIG``).

The standard library alone: it starts once per session, in a fresh interpreter.
"""

from __future__ import annotations

import array
import contextlib
import os
import signal
import socket
import sys

# Sockets in one answer: a few more than the host's pool keeps, well under the kernel's
# SCM_MAX_FD (253).
MAX_BATCH = 16
# The one byte that carries an answer's descriptors.
ANSWER = b"s"
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def _isolate() -> None:
    """Non-dumpable (no ptrace, no /proc/PID/mem, no pidfd_getfd even for a process of
    the same uid that could name it), no capabilities (nsenter's entry into a user
    namespace where this uid is root gave it all of them there), ended with the host."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for option, value in (
        (_PR_SET_DUMPABLE, 0),
        (_PR_SET_NO_NEW_PRIVS, 1),
        (_PR_SET_PDEATHSIG, signal.SIGKILL),
    ):
        if libc.prctl(option, value, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl({option})")
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: twice 32 bits, none
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def app_socket() -> socket.socket:
    """A TCP socket that reaches every loopback address an app may listen on
    (:mod:`sandbridge.protocol.app_address`): IPv6 with ``IPV6_V6ONLY`` off, so that it
    connects to ``::1`` and, as ``::ffff:127.0.0.1``, to ``127.0.0.1``; an IPv4 one where
    the kernel has no IPv6 (the host then tries ``127.0.0.1`` alone)."""
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    except OSError:  # EAFNOSUPPORT: booted with ipv6.disable=1
        return socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        # Off by default on Linux, but a sysctl (net.ipv6.bindv6only) can turn it on.
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    except BaseException:
        sock.close()
        raise
    return sock


def serve(channel: socket.socket) -> None:
    """Answer the host's requests on ``channel`` until it closes; then close ``channel``."""
    with channel:
        while True:
            request = channel.recv(1)  # recv, not recvmsg: a descriptor sent here is dropped
            if not request:
                return
            count = request[0]
            if not 1 <= count <= MAX_BATCH:
                return  # not the host's request: the host's code never sends one
            made = [app_socket() for _ in range(count)]
            rights = array.array("i", (sock.fileno() for sock in made))
            try:
                channel.sendmsg([ANSWER], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
            finally:
                for sock in made:
                    sock.close()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not all(word.isdigit() for word in argv):
        print("usage: python -m sandbridge.relay.host.socket_minter FD HOST_PID", file=sys.stderr)
        return 2
    fd, host = int(argv[0]), int(argv[1])
    _isolate()
    if os.getppid() != host:
        return 0  # the host is gone already: its death signal came before it was asked for
    # Nothing of the host's but the channel: nsenter's namespace descriptors go.
    os.closerange(3, fd)
    os.closerange(fd + 1, 65536)
    channel = socket.socket(fileno=fd)
    channel.setblocking(True)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        serve(channel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
