"""Small asyncio building blocks shared by the host and the shim."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import socket
import stat
import struct
from collections.abc import Callable
from pathlib import Path
from typing import cast

from sandbridge.aio.tasks import first_done, running
from sandbridge.protocol.jsonline import LineReader

# One read when copying raw bytes through streams: large reads keep per-byte overhead low.
COPY_READ_BYTES = 256 * 1024
# After refusing a peer, read (and drop) what it still sends for this long or this much
# before closing: closing with unread bytes resets the connection, and a reset can
# destroy the refusal before the peer reads it.
LINGER_SECONDS = 1.0
LINGER_BYTES = 1024 * 1024


_PEERCRED = struct.Struct("3i")


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """A connected Unix socket peer's pid and uid, as the kernel saw them at ``connect``
    (``SO_PEERCRED``; the peer cannot forge them)."""
    pid, uid, _ = _PEERCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    )
    return pid, uid


def connect_checked(
    sock: socket.socket, path: Path, refuse: Callable[[str], Exception], what: str
) -> None:
    """Connect ``sock`` to the Unix socket at ``path``, a path the sandbox can write.

    The sandbox could replace the socket there with a symlink to a host socket, a FIFO or
    a file. So the path is opened with ``O_PATH | O_NOFOLLOW``, what was opened must be a
    socket owned by this user, and ``sock`` connects through ``/proc/self/fd/N``: the inode
    checked is the one connected to, with no window for a swap in between. Every refusal
    is ``refuse(message)``, the message naming ``path`` (``what`` says who should serve it).

    Pass a non-blocking ``sock``: a blocking connect to a listener whose queue is full
    waits until the listener accepts, which a hostile one never does, and the event loop
    (in the daemon: every session's) would wait with it. A non-blocking one raises
    :class:`BlockingIOError` instead, and the caller decides whether to try again.
    """
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise refuse(f"{path} does not exist: is {what} running?") from None
    except OSError as exc:
        raise refuse(f"cannot open {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISLNK(info.st_mode):
            raise refuse(f"{path} is a symlink; refusing to follow it")
        if not stat.S_ISSOCK(info.st_mode):
            raise refuse(f"{path} is not a socket; refusing to use it")
        if info.st_uid != os.getuid():
            raise refuse(f"{path} is owned by uid {info.st_uid}; refusing to use it")
        try:
            sock.connect(f"/proc/self/fd/{fd}")
        except BlockingIOError:
            raise
        except OSError as exc:
            raise refuse(f"cannot connect to {path}: {exc.strerror}") from None
    finally:
        os.close(fd)


# Linux's SO_PEERPIDFD (6.5 and later): a pidfd of the peer as it was at ``connect``.
SO_PEERPIDFD: int = getattr(socket, "SO_PEERPIDFD", 77)


def peer_shares_mount_namespace(sock: socket.socket, pid: int) -> bool:
    """Whether the peer of ``sock`` (pid ``pid``, from :func:`peer_credentials`) lives in
    this process's mount namespace, so that a path it names is the same file here.

    Every sandbox and container has a mount namespace of its own: a peer in one is told
    apart whatever way it found the socket. False when it cannot be told (its pid is not
    visible here, it is gone, its ``/proc`` entry cannot be read). The pidfd taken at
    ``connect`` (or, on an older kernel, right after) still naming a live process after
    the check proves that ``/proc/PID`` was the peer's, not a reused pid's. Raises
    :class:`OSError` when the pidfd cannot be had (out of descriptors): not an answer."""
    if pid <= 0:
        return False
    try:
        pidfd = _peer_pidfd(sock, pid)
    except ProcessLookupError:
        return False
    try:
        theirs = os.stat(f"/proc/{pid}/ns/mnt")
        ours = os.stat("/proc/self/ns/mnt")
        signal.pidfd_send_signal(pidfd, 0)
    except OSError:
        return False
    finally:
        os.close(pidfd)
    return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)


def _peer_pidfd(sock: socket.socket, pid: int) -> int:
    try:
        data = sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD, 4)
    except OSError as exc:
        if exc.errno != errno.ENOPROTOOPT:
            raise
        return os.pidfd_open(pid)  # a kernel before 6.5
    fd: int = struct.unpack("i", data)[0]
    return fd


async def read_line(reader: asyncio.StreamReader, limit: int) -> tuple[bytes, bytes]:
    """Read one line of at most ``limit`` bytes; return it and what followed it."""
    lines = LineReader(limit)
    while True:
        data = await reader.read(65536)
        if not data:
            return lines.feed_eof(), b""
        line = lines.feed(data)
        if line is not None:
            return line, lines.rest


class Pump(asyncio.Protocol):
    """Forwards what its transport receives to a peer's transport, from the read callback.

    The coroutine copy (:func:`copy`) costs a task wake-up, a ``read`` and a ``drain``
    coroutine per chunk; forwarding straight from ``data_received`` costs one
    ``write``. The relay's keep-alive requests are small, so that overhead was most of
    what the shim spent per request. Backpressure stays end to end: when the peer's
    write buffer passes its high-water mark, the peer's transport calls
    :meth:`pause_writing` and this side stops reading until it drains
    (:meth:`resume_writing`), so a direction holds at most one read plus the write
    buffer limit. An end of stream is passed on as a half-close; once both directions
    have ended, both transports close. A transport that fails aborts its peer.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: Pump | None = None
        self.ended = False  # this transport's peer sent its end of stream
        loop = asyncio.get_running_loop()
        self.finished = loop.create_future()  # done at the end of stream or connection_lost
        self.lost = loop.create_future()  # done at connection_lost

    def link(self, peer: Pump) -> None:
        """Forward both ways between this pump and ``peer`` from now on."""
        self.peer, peer.peer = peer, self

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but behave as one.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.transport.is_closing():
            peer.transport.write(data)

    def eof_received(self) -> bool:
        self.ended = True
        if not self.finished.done():
            self.finished.set_result(None)
        peer = self.peer
        if peer is None or peer.transport is None or peer.ended:
            self.close()
            if peer is not None:
                peer.close()
            return False
        if peer.transport.can_write_eof() and not peer.transport.is_closing():
            with contextlib.suppress(OSError):
                peer.transport.write_eof()
        return True  # keep the other direction open

    def pause_writing(self) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.transport.is_closing():
            peer.transport.pause_reading()

    def resume_writing(self) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.transport.is_closing():
            peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        for future in (self.finished, self.lost):
            if not future.done():
                future.set_result(None)
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.transport.is_closing():
            if exc is None:
                peer.close()
            else:
                peer.transport.abort()
        if peer is not None and peer.lost.done():
            # Both sides are gone: unlink them, so that refcounting frees the pair
            # instead of the cyclic garbage collector.
            self.peer = peer.peer = None

    def close(self) -> None:
        """Close this side (what was written is still sent)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def abort(self) -> None:
        """Drop this side at once."""
        if self.transport is not None:
            self.transport.abort()


async def close_writer(writer: asyncio.StreamWriter) -> None:
    """Close a stream, ignoring a peer that already went away."""
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy bytes until ``src`` ends, then half-close ``dst``; each write awaits drain."""
    while data := await src.read(COPY_READ_BYTES):
        dst.write(data)
        await dst.drain()
    if dst.can_write_eof() and not dst.is_closing():
        with contextlib.suppress(OSError):
            dst.write_eof()


async def copy_both_ways(
    a_reader: asyncio.StreamReader,
    a_writer: asyncio.StreamWriter,
    b_reader: asyncio.StreamReader,
    b_writer: asyncio.StreamWriter,
    *,
    grace: float | None,
) -> None:
    """Copy a -> b and b -> a until both ends close or either fails.

    After one direction ends cleanly, the other gets ``grace`` seconds to finish
    (``None``: as long as it takes); a failing direction stops both at once.
    """
    async with running(copy(a_reader, b_writer), copy(b_reader, a_writer)) as both:
        done = await first_done(*both)
        if any(task.exception() is None for task in done):
            await asyncio.wait(both, timeout=grace)


async def linger_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Half-close after a refusal, then drain the peer briefly so the refusal arrives."""
    await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()
    with contextlib.suppress(TimeoutError, OSError):
        async with asyncio.timeout(LINGER_SECONDS):
            discarded = 0
            while discarded < LINGER_BYTES and (data := await reader.read(COPY_READ_BYTES)):
                discarded += len(data)
