"""Where the daemon lives: its pid lock and its socket, in the user's state root.

One daemon per user: ``daemon.lock`` (0600) holds an ``flock`` for the daemon's life
and its pid, so a second daemon refuses, naming the first, and a daemon killed with
SIGKILL leaves a lock anyone can take again. ``daemon.sock`` is a ``SOCK_SEQPACKET``
Unix socket, 0600 in the 0700 state root; a stale one is replaced only by the holder of
the lock. Under systemd's socket activation the socket comes bound already (fd 3).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sandbridge.aio.before_loop import listen_private
from sandbridge.exceptions import DaemonError
from sandbridge.places.registry import writable_state_root
from sandbridge.protocol.contract import DAEMON_LOCK, DAEMON_SOCKET

# Clients that may wait in the accept queue while the daemon starts sessions.
BACKLOG = 128
# A pid is a few digits; anything longer in the lock file was not written by a daemon.
MAX_PID_BYTES = 32


@dataclass
class DaemonPlace:
    """The daemon's lock (held) and its listening socket."""

    root: Path
    lock_fd: int
    listener: socket.socket
    # The socket file this daemon bound (None: systemd's socket, which it leaves alone).
    bound: Path | None

    def close(self) -> None:
        if self.bound is not None:
            with contextlib.suppress(FileNotFoundError):
                self.bound.unlink()
        self.listener.close()
        os.close(self.lock_fd)


def take_lock(path: Path) -> int:
    """Hold ``path``'s flock and write this pid in it; refuse if a daemon holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, MAX_PID_BYTES, 0).decode("ascii", "replace").strip()
        os.close(fd)
        raise DaemonError(
            f"a sandbridge daemon already runs for this user (pid {holder or 'unknown'}); "
            f"its lock is {path}"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def bind_socket(path: Path) -> socket.socket:
    """A listening ``SOCK_SEQPACKET`` socket at ``path``, 0600 from the start."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a dead daemon's: the lock says no live one uses it
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    listen_private(sock, path, BACKLOG)
    return sock


@contextlib.contextmanager
def daemon_place(inherited: socket.socket | None = None) -> Iterator[DaemonPlace]:
    """Take the lock, then bind ``daemon.sock`` (or use ``inherited``, systemd's socket)."""
    root, note = writable_state_root()
    if note is not None:
        print(f"sandbridge: {note}", flush=True)
    lock_fd = take_lock(root / DAEMON_LOCK)
    try:
        listener = inherited if inherited is not None else bind_socket(root / DAEMON_SOCKET)
    except OSError as exc:
        os.close(lock_fd)
        raise DaemonError(f"cannot listen on {root / DAEMON_SOCKET}: {exc.strerror}") from None
    place = DaemonPlace(root, lock_fd, listener, None if inherited else root / DAEMON_SOCKET)
    try:
        yield place
    finally:
        place.close()
