"""The sandbox's side of starting terminal workers: the entry's private channel, or
``terminal.sock`` in the runtime dir for a sandbox another runtime starts.

``sandbridge run`` hands the sandbox's first process one end of a ``SOCK_SEQPACKET``
socket pair at start (an inherited descriptor, never in the runtime dir and never passed
to the user's command). For each ``{"op": "start"}`` message on it,
:func:`serve_terminal_starts` starts one :mod:`sandbridge.terminals.pty_worker` with one
end of a fresh socket pair and sends the other end back to the host (``SCM_RIGHTS``).
Nothing in such a sandbox's runtime dir can ask for a worker: only the host holds the
other end.

``sandbridge host`` cannot hand a descriptor to a sandbox podman or docker starts, so
there ``sandbridge shim --terminals`` runs :func:`serve_terminal_socket`: each
connection to ``terminal.sock`` becomes the link of one new worker. Any process in the
sandbox may connect too; it gets what it already has (a shell as itself, in its own
sandbox, once it plays the host's part), never a terminal the owner approved for
someone else: the worker speaks only to the client whose key the host sends it, and the
host checks the socket before it connects (:mod:`.worker_socket`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
from pathlib import Path

from sandbridge.aio.before_loop import bind_unix_socket
from sandbridge.protocol.jsonline import decode_json

# One start request or answer is a short JSON object.
MAX_MESSAGE = 1024
# Workers terminal.sock runs at once: a few terminals for the owner, bounded so that
# connections alone cannot fill the sandbox with processes. Past it, a connection is
# closed at once (the host's attach is refused ``not_ready``).
MAX_SOCKET_WORKERS = 8


async def _start_worker(link: socket.socket) -> asyncio.subprocess.Process:
    """One PTY worker on ``link`` (its own copy: the caller closes ``link``)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sandbridge.terminals.pty_worker",
        "--fd",
        str(link.fileno()),
        pass_fds=(link.fileno(),),
        stdin=asyncio.subprocess.DEVNULL,
    )


async def serve_terminal_starts(fd: int) -> None:
    """Start a PTY worker for each host request on ``fd`` until the host closes it."""
    channel = socket.socket(fileno=fd)
    channel.setblocking(False)
    loop = asyncio.get_running_loop()
    workers: set[asyncio.Task[int]] = set()
    try:
        while True:
            message = await loop.sock_recv(channel, MAX_MESSAGE)
            if not message:
                return
            try:
                request = decode_json(message)
                ok = isinstance(request, dict) and request.get("op") == "start"
            except ValueError:
                ok = False
            if not ok:
                channel.send(json.dumps({"ok": False, "error": "unknown request"}).encode())
                continue
            host_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            with host_end, worker_end:
                process = await _start_worker(worker_end)
                answer = json.dumps({"ok": True, "pid": process.pid}).encode()
                socket.send_fds(channel, [answer], [host_end.fileno()])
            workers.add(asyncio.create_task(process.wait()))
            workers = {task for task in workers if not task.done()}
    finally:
        await _forget(workers)
        channel.close()


def bind_terminal_socket(path: Path) -> socket.socket:
    """Listen on ``path`` (0600; a previous shim's socket there is replaced)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return bind_unix_socket(path)


async def serve_terminal_socket(listener: socket.socket, path: Path) -> None:
    """Start a PTY worker for each connection to ``listener`` (bound at ``path`` by
    :func:`bind_terminal_socket`) until cancelled; then close it and remove ``path`` if it
    is still the socket bound there."""
    bound = os.lstat(path).st_ino
    loop = asyncio.get_running_loop()
    workers: set[asyncio.Task[int]] = set()
    try:
        while True:
            conn, _ = await loop.sock_accept(listener)
            workers = {task for task in workers if not task.done()}
            with conn:
                if len(workers) >= MAX_SOCKET_WORKERS:
                    continue
                process = await _start_worker(conn)
            workers.add(asyncio.create_task(process.wait()))
    finally:
        await _forget(workers)
        listener.close()
        with contextlib.suppress(OSError):
            if os.lstat(path).st_ino == bound:
                path.unlink()


async def _forget(workers: set[asyncio.Task[int]]) -> None:
    """Stop waiting for running workers (they end with their terminals, not with this)."""
    for task in workers:
        task.cancel()
    with contextlib.suppress(Exception):
        await asyncio.gather(*workers, return_exceptions=True)
