"""The sandbox's side of starting terminal workers for a sandbox another runtime starts:
``terminal.sock`` in the runtime dir (the entry of a sandbox sandbridge runs serves the
host's private channel instead: :mod:`sandbridge.terminals.light_starter`).

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
import os
import socket
from pathlib import Path

from sandbridge.aio.before_loop import bind_unix_socket
from sandbridge.terminals.light_starter import worker_argv

# Workers terminal.sock runs at once: a few terminals for the owner, bounded so that
# connections alone cannot fill the sandbox with processes. Past it, a connection is
# closed at once (the host's attach is refused ``not_ready``).
MAX_SOCKET_WORKERS = 8


async def _start_worker(link: socket.socket) -> asyncio.subprocess.Process:
    """One PTY worker on ``link`` (its own copy: the caller closes ``link``)."""
    program, *args = worker_argv(link.fileno())
    return await asyncio.create_subprocess_exec(
        program,
        *args,
        pass_fds=(link.fileno(),),
        stdin=asyncio.subprocess.DEVNULL,
    )


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
