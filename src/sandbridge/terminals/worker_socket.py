"""The host's way to terminal workers in a sandbox another runtime starts: ``terminal.sock``.

``sandbridge run`` hands the sandbox's first process a private channel
(:mod:`.sandbox_channel`). ``sandbridge host`` is not the parent of ``podman run`` and has
nothing to hand over: the only thing it shares with such a sandbox is the runtime dir.
So there ``sandbridge shim --terminals`` listens on ``terminal.sock``, and each
connection the host makes to it becomes the link of one new PTY worker
(:func:`~sandbridge.terminals.starter.serve_terminal_socket`); no descriptor crosses.

The path is as hostile as ``upstream.sock``: it is opened without following a link, must
be a socket of this user, and the host connects through the very inode it checked
(:func:`~sandbridge.aio.unix_sockets.connect_checked`). A socket this process serves
itself (``relay.sock`` or ``egress.sock`` moved there by the sandbox) is refused too, the
connect never waits on a full queue (the event loop serves every other session of the
daemon), and the connection refuses descriptors. What answers is then checked exactly
as a worker on the private channel is: only the worker's frame kinds, READY within the
readiness budget, or the attach is refused ``not_ready``.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

from sandbridge.aio import before_loop, untrusted_fds
from sandbridge.aio.unix_sockets import connect_checked, peer_credentials
from sandbridge.exceptions import ControlRefusal
from sandbridge.protocol.contract import TERMINAL_SOCKET
from sandbridge.terminals.framed_stream import FramedStream
from sandbridge.terminals.sandbox_channel import worker_stream

SERVED_BY = "sandbridge shim --terminals"


def _refusal(message: str) -> ControlRefusal:
    return ControlRefusal("worker_failed", message)


class WorkerSocket:
    """Starts a worker per connection to ``terminal.sock`` in a runtime dir."""

    def __init__(self, runtime_dir: Path) -> None:
        self.path = runtime_dir / TERMINAL_SOCKET

    def unavailable(self) -> str | None:
        """Why no worker can start now, said before an approval is spent; None if a
        socket is there (the full checks come with the connect)."""
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return f"no {TERMINAL_SOCKET} in the runtime dir: run {SERVED_BY} inside the sandbox"
        except OSError as exc:
            return f"cannot look at {self.path}: {exc.strerror}"
        if not stat.S_ISSOCK(info.st_mode):
            return f"{self.path} is not a socket; refusing to use it"
        return None

    async def start_worker(self) -> tuple[FramedStream, socket.socket]:
        """Connect a new worker; return its stream and the connected socket, which the
        caller releases (:func:`untrusted_fds.release_socket`) once the stream is closed.
        A refusal is a :class:`ControlRefusal` naming the path."""
        sock = socket.socket(
            socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
        )
        try:
            before_loop.refuse_descriptors(sock)
            try:
                connect_checked(sock, self.path, _refusal, SERVED_BY)
            except BlockingIOError:  # the worker's start is due now, not once it accepts
                raise _refusal(f"{self.path} accepts no connection (its queue is full)") from None
            pid, _ = peer_credentials(sock)
            if pid == os.getpid():
                raise _refusal(f"{self.path} is a socket this host serves; refusing to use it")
        except BaseException:
            untrusted_fds.release_socket(sock)
            raise
        return await worker_stream(sock), sock

    def close(self) -> None:
        """Nothing to let go: each worker's connection is its own."""
