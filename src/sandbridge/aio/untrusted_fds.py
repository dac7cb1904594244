"""Descriptors from the sandbox: receive them, refuse them, let them go, never blocking.

Threat: ``close()`` of the last reference to a TCP socket whose ``SO_LINGER`` is on
and whose send queue is not empty sleeps until the queue drains or the linger time
(up to hours) runs out, also for a non-blocking socket. A hostile sandbox hands the
host such a socket (a handoff, a terminal worker, a descriptor attached to any message
on a Unix socket it can write to) and re-arms ``SO_LINGER`` through its own copy at
any time. If the event loop thread performs that last close, every app, lease,
revocation and egress decision of the host stops. The kernel closes descriptors on
the host's behalf too, in the thread that triggers it: descriptors attached to a
message read without room for them, or still queued in a Unix socket being closed.

Defence, all of it here so that every place that receives descriptors does the same:

1. :func:`receive` takes every descriptor with room to spare and turns ``SO_LINGER``
   off on each socket at once (a close then returns at once, the kernel finishing the
   connection in the background).
2. The event loop never performs the last close of a received descriptor.
   :func:`release` hands it to closer threads, which turn ``SO_LINGER`` off again just
   before closing (the sandbox could have re-armed it). A close that still blocks
   holds up one daemon thread, never the loop, nor interpreter exit (and the kernel
   does not linger for an exiting process).
3. A transport (which closes its socket on the loop thread) gets a duplicate from
   :func:`for_transport`; the original is kept until the transport is gone, then
   released: the transport's close is never the last.
4. A Unix socket that should never carry descriptors refuses them in the kernel
   (:func:`.before_loop.refuse_descriptors`, ``SO_PASSRIGHTS`` off, Linux 6.16 or later): the
   sandbox's ``sendmsg`` fails with ``EPERM``. On an older kernel the option does not
   exist and this step is skipped (a descriptor attached to such a message is then
   released by the kernel in the reading thread: see docs/security.md).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import os
import queue
import socket
import struct
import threading

from sandbridge.aio.before_loop import SO_PASSRIGHTS, refuse_descriptors

# struct linger {l_onoff, l_linger}: off (close returns, the kernel finishes the
# connection in the background), or on with 0 s (close resets the connection at once:
# for descriptors the host refused, on which it never wrote anything).
LINGER_OFF = struct.pack("ii", 0, 0)
LINGER_RESET = struct.pack("ii", 1, 0)
# Closer threads: enough that a few closes blocked by a lost race (the sandbox re-arming
# SO_LINGER between our setsockopt and close) do not hold up the others; a thread is
# started only when none is idle. Past this many, closes wait in the queue.
MAX_CLOSERS = 16
FD_SIZE = array.array("i").itemsize


def disarm(fd: int, reset: bool = False) -> None:
    """Make a close of ``fd`` return at once (no-op for what is not a socket)."""
    _setsockopt_linger(fd, LINGER_RESET if reset else LINGER_OFF)


def _setsockopt_linger(fd: int, value: bytes) -> None:
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return  # not a socket: nothing lingers
    try:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, value)
    finally:
        sock.detach()


class _Closer:
    """Daemon threads that close descriptors handed to them, in order of arrival."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[int, bool]] = queue.SimpleQueue()
        self._lock = threading.Condition()
        self._threads = 0
        self._idle = 0
        self._pending = 0

    def put(self, fd: int, reset: bool) -> None:
        with self._lock:
            self._pending += 1
            start = self._idle == 0 and self._threads < MAX_CLOSERS
            if start:
                self._threads += 1
        self._queue.put((fd, reset))
        if start:
            threading.Thread(target=self._run, name="sandbridge-fd-closer", daemon=True).start()

    def _run(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            fd, reset = self._queue.get()
            with self._lock:
                self._idle -= 1
            _setsockopt_linger(fd, LINGER_RESET if reset else LINGER_OFF)
            with contextlib.suppress(OSError):
                os.close(fd)
            with self._lock:
                self._pending -= 1
                if not self._pending:
                    self._lock.notify_all()

    def settle(self, timeout: float) -> bool:
        with self._lock:
            return self._lock.wait_for(lambda: not self._pending, timeout)


_closer = _Closer()


def release(fd: int, *, reset: bool = False) -> None:
    """Close a received descriptor (or a socket that may hold some) off the event loop.

    ``reset``: the host never wrote on it (a refused descriptor): reset the connection
    instead of finishing it.
    """
    _closer.put(fd, reset)


def release_all(fds: list[int], *, reset: bool = True) -> None:
    """:func:`release` each of ``fds`` (refused descriptors by default); empty the list."""
    for fd in fds:
        release(fd, reset=reset)
    fds.clear()


def release_socket(sock: socket.socket, *, reset: bool = False) -> None:
    """:func:`release` the descriptor of ``sock`` (which no longer owns it)."""
    fd = sock.detach()
    if fd >= 0:
        release(fd, reset=reset)


def settle(timeout: float = 5.0) -> bool:
    """Wait until every released descriptor is closed (for tests); False on timeout."""
    return _closer.settle(timeout)


def for_transport(sock: socket.socket, closed: asyncio.Future[None] | None = None) -> socket.socket:
    """A duplicate of ``sock`` for a transport; ``sock``'s own descriptor is kept open
    until ``closed`` is done (call :func:`keep_until` later if it is not known yet)."""
    transport_sock = sock.dup()
    transport_sock.setblocking(False)
    if closed is not None:
        keep_until(sock, closed)
    return transport_sock


def keep_until(sock: socket.socket, closed: asyncio.Future[None]) -> None:
    """Release ``sock`` once ``closed`` is done (the transport using its duplicate is gone)."""
    fd = sock.detach()
    closed.add_done_callback(lambda _: release(fd))


def receive(sock: socket.socket, nbytes: int, room: int, fds: list[int]) -> tuple[bytes, bool]:
    """One ``recvmsg`` on ``sock`` with room for ``room`` descriptors and more.

    Appends every received descriptor to ``fds`` (close-on-exec, ``SO_LINGER`` off: the
    caller adopts or releases them) and returns the data and whether the control data was
    truncated (descriptors beyond the room, released by the kernel: refuse the message).
    """
    data, ancdata, flags, _ = sock.recvmsg(
        nbytes, socket.CMSG_SPACE(room * FD_SIZE), socket.MSG_CMSG_CLOEXEC
    )
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            received = array.array("i")
            received.frombytes(payload[: len(payload) - len(payload) % FD_SIZE])
            for fd in received:
                disarm(fd)
            fds.extend(received)
    return data, bool(flags & socket.MSG_CTRUNC)


def accept_descriptors(sock: socket.socket, accept: bool) -> None:
    """Turn the kernel's refusal of descriptors on ``sock`` off (``accept``) or back on."""
    if accept:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, SO_PASSRIGHTS, 1)
    else:
        refuse_descriptors(sock)
