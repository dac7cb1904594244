"""The host end of a session's private channel into the sandbox: it starts terminal workers.

``sandbridge run`` passes the other end to the sandbox entry (``terminals/starter.py``),
which answers each ``{"op": "start"}`` with one end of a fresh socket pair to a new PTY
worker (``SCM_RIGHTS``). The descriptor comes from the hostile side, so the channel
accepts descriptors only while it waits for the answer to its own start, keeps room for a
few extra ones (received and released here rather than dropped by the kernel on the
loop), and takes nothing but a Unix stream socket.
"""

from __future__ import annotations

import asyncio
import socket

from sandbridge.aio import before_loop, untrusted_fds
from sandbridge.exceptions import ControlRefusal
from sandbridge.terminals import fd_io
from sandbridge.terminals.framed_stream import FramedStream
from sandbridge.terminals.frames import FROM_WORKER

START_MESSAGE = b'{"op": "start"}'
# Room for descriptors in a start answer: the one expected plus a few, so that extra ones
# are received and released by the host rather than dropped by the kernel on the loop.
WORKER_FD_ROOM = 4
# A start answer is a short JSON object; the descriptor is what matters.
MAX_START_ANSWER = 1024


class SandboxChannel:
    """Owns the host end of the channel; starts one worker at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        sock.setblocking(False)
        # Descriptors only with the answer to a start (see start_worker).
        before_loop.refuse_descriptors(sock)
        self._lock = asyncio.Lock()

    def unavailable(self) -> str | None:
        """Always there: the sandbox's entry holds the other end for the session's life."""
        return None

    async def start_worker(self) -> tuple[FramedStream, socket.socket]:
        """Ask the sandbox entry for a worker; get the host end of its socket.

        Returns the worker's stream and the received socket, which the caller releases
        (:func:`untrusted_fds.release_socket`) once the stream is closed: the stream's
        transport has a duplicate, so its close on the loop is never the last."""
        loop = asyncio.get_running_loop()
        fds: list[int] = []
        try:
            async with self._lock:
                untrusted_fds.accept_descriptors(self._sock, True)
                try:
                    await loop.sock_sendall(self._sock, START_MESSAGE)
                    await fd_io.readable(self._sock.fileno())
                    _answer, truncated = untrusted_fds.receive(
                        self._sock, MAX_START_ANSWER, WORKER_FD_ROOM, fds
                    )
                finally:
                    untrusted_fds.accept_descriptors(self._sock, False)
            worker_sock = worker_socket(fds, truncated)
        except BaseException:
            untrusted_fds.release_all(fds)
            raise
        before_loop.refuse_descriptors(worker_sock)
        return await worker_stream(worker_sock), worker_sock

    def close(self) -> None:
        """Let the channel go (off the loop: it may hold descriptors in flight)."""
        untrusted_fds.release_socket(self._sock)


def worker_socket(fds: list[int], truncated: bool) -> socket.socket:
    """The worker's end from a start answer: exactly one Unix stream socket (whose close
    never lingers), else a refusal. Takes ownership of ``fds``."""
    if len(fds) == 1 and not truncated:
        try:
            sock = socket.socket(fileno=fds[0])  # getsockopt: ENOTSOCK for anything else
        except OSError:
            pass
        else:
            fds.clear()
            if sock.family == socket.AF_UNIX and sock.type == socket.SOCK_STREAM:
                sock.setblocking(False)
                return sock
            untrusted_fds.release_socket(sock, reset=True)
    untrusted_fds.release_all(fds)
    raise ControlRefusal("worker_failed", "the sandbox did not start a worker")


async def worker_stream(sock: socket.socket) -> FramedStream:
    """The frames of a worker's connected ``sock``, read and written on a duplicate: the
    transport's close is never the last reference (``sock`` is released off the loop).
    On failure ``sock`` is released too."""
    duplicate = untrusted_fds.for_transport(sock)
    try:
        reader, writer = await asyncio.open_unix_connection(sock=duplicate)
    except BaseException:
        duplicate.close()  # not the last reference: sock holds one
        untrusted_fds.release_socket(sock)
        raise
    return FramedStream(reader, writer, FROM_WORKER)
