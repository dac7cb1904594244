"""The sandbox entry's side of the host's private terminal channel.

The host hands the sandbox's first process one end of a ``SOCK_SEQPACKET`` socket pair
at start (an inherited descriptor, never in the runtime dir and never passed to the
user's command). For each ``{"op": "start"}`` message on it, this starts one
:mod:`sandbridge.terminals.pty_worker` with one end of a fresh socket pair and sends the
other end back to the host (``SCM_RIGHTS``). Nothing in the runtime dir can ask for a
worker: only the host holds the other end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys

from sandbridge.protocol.jsonline import decode_json

# One start request or answer is a short JSON object.
MAX_MESSAGE = 1024


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
                process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "sandbridge.terminals.pty_worker",
                    "--fd",
                    str(worker_end.fileno()),
                    pass_fds=(worker_end.fileno(),),
                    stdin=asyncio.subprocess.DEVNULL,
                )
                answer = json.dumps({"ok": True, "pid": process.pid}).encode()
                socket.send_fds(channel, [answer], [host_end.fileno()])
            workers.add(asyncio.create_task(process.wait()))
            workers = {task for task in workers if not task.done()}
    finally:
        for task in workers:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*workers, return_exceptions=True)
        channel.close()
