"""Terminal starts over the host's private channel, without an event loop: what the
sandbox entry serves on its :class:`~sandbridge.aio.poll_loop.PollLoop`.

``sandbridge run`` hands the sandbox's first process one end of a ``SOCK_SEQPACKET``
socket pair at start (an inherited descriptor, never in the runtime dir and never passed
to the user's command). For each ``{"op": "start"}`` message on it, :class:`LightStarter`
starts one :mod:`sandbridge.terminals.pty_worker` with one end of a fresh socket pair
(``posix_spawn``) and sends the other end back to the host (``SCM_RIGHTS``). Nothing in
such a sandbox's runtime dir can ask for a worker: only the host holds the other end.

A terminal start used to load the event loop into the entry; the entry needs none for
it: one message in, one process started, one message out, and each worker reaped when
it ends (its pidfd is a reader like any other). Once something else loads the event
loop, the same code goes on serving there. ``terminal.sock`` (a sandbox another runtime
starts) is :mod:`sandbridge.terminals.starter`'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys

from sandbridge.aio.before_loop import reap
from sandbridge.aio.poll_loop import PollLoop
from sandbridge.protocol.jsonline import decode_json

# One start request or answer is a short JSON object.
MAX_MESSAGE = 1024
# What the standard library's subprocess resets for a child (Python ignores SIGPIPE and
# SIGXFSZ for itself; the worker's shell expects the default).
_RESTORED_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)


def worker_argv(fd: int) -> list[str]:
    """The command line of a PTY worker whose link to the host is descriptor ``fd``."""
    return [sys.executable, "-m", "sandbridge.terminals.pty_worker", "--fd", str(fd)]


def spawn_worker(link: socket.socket) -> int:
    """Start a PTY worker on a copy of ``link`` (the caller closes ``link``); its pid.
    Only ``link`` is inherited: every other descriptor of this process is close-on-exec
    (Python's default, and the entry's for what it inherited)."""
    fd = link.fileno()
    os.set_inheritable(fd, True)
    try:
        return os.posix_spawn(
            sys.executable,
            worker_argv(fd),
            os.environ,
            file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)],
            setsigdef=_RESTORED_SIGNALS,
        )
    finally:
        os.set_inheritable(fd, False)


class LightStarter:
    """Serves the host's requests on the channel ``fd`` on ``loop`` until the host
    closes it."""

    def __init__(self, loop: PollLoop, fd: int) -> None:
        self._loop = loop
        self._channel = socket.socket(fileno=fd)
        self._channel.setblocking(False)
        self._open = True
        self._workers: dict[int, int] = {}  # pidfd -> pid

    def start(self) -> None:
        """Serve the channel."""
        self._loop.add_reader(self._channel.fileno(), self._readable)

    def close(self) -> None:
        """Stop serving and waiting for workers (they end with their terminals, not with
        this)."""
        self._stop_serving()
        for pidfd in list(self._workers):
            self._loop.remove_reader(pidfd)
            os.close(pidfd)
        self._workers.clear()

    @property
    def workers(self) -> int:
        """Workers started here and still running."""
        return len(self._workers)

    def _stop_serving(self) -> None:
        if self._open:
            self._open = False
            self._loop.remove_reader(self._channel.fileno())
            self._channel.close()

    def _readable(self) -> None:
        try:
            message = self._channel.recv(MAX_MESSAGE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            message = b""
        if not message:  # the host closed its end: no more terminals
            self._stop_serving()
            return
        try:
            request = decode_json(message)
            ok = isinstance(request, dict) and request.get("op") == "start"
        except ValueError:
            ok = False
        if not ok:
            self._answer(json.dumps({"ok": False, "error": "unknown request"}).encode())
            return
        host_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with host_end, worker_end:
            pid = spawn_worker(worker_end)
            # Counted before the host hears of it: whoever the answer wakes sees it.
            pidfd = os.pidfd_open(pid)
            self._workers[pidfd] = pid
            self._loop.add_reader(pidfd, lambda: self._ended(pidfd))
            self._answer(json.dumps({"ok": True, "pid": pid}).encode(), host_end.fileno())

    def _answer(self, answer: bytes, fd: int | None = None) -> None:
        """One answer on the channel; a host that does not take it (gone, or not
        reading) gets none, and its attach ends ``not_ready``."""
        try:
            if fd is None:
                self._channel.send(answer)
            else:
                socket.send_fds(self._channel, [answer], [fd])
        except OSError:
            pass

    def _ended(self, pidfd: int) -> None:
        pid = self._workers.pop(pidfd)
        self._loop.remove_reader(pidfd)
        os.close(pidfd)
        with contextlib.suppress(ChildProcessError):  # reaped by whoever else waited
            reap(pid)
