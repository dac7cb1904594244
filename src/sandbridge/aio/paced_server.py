"""A Unix socket server that accepts at a bounded rate: :class:`PacedServer`.

Why: the host's sockets that a sandbox reaches (``relay.sock``, ``egress.sock``) are
served on one event loop, a daemon's for every session.
A sandbox that connects as fast as it can (each request refused at once, cheaply) still
had the loop accept, read, parse and answer thousands of times a second: 9,000 refusals a
second on ``relay.sock`` took most of a core, and every other session waited for it.

How: the server accepts a connection only while its window (:class:`WindowLimit`) has
room; past that, connections wait in the kernel's backlog (512, ``UNIX_BACKLOG``) and
then are refused by the kernel, so a flood costs the host nothing beyond the rate, and
only the flooding session's own requests wait. Each accepted connection is served as
:func:`asyncio.start_unix_server` serves it: ``handler(reader, writer)`` in a task.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Awaitable, Callable

from sandbridge import log
from sandbridge.aio.tasks import TaskSet
from sandbridge.protocol.limits import WindowLimit

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
# asyncio's own default for a stream's line limit.
STREAM_LIMIT = 64 * 1024
# accept(2) failures that say the process or the machine is out of something: accepting
# pauses for RESOURCE_PAUSE seconds, as asyncio's own servers do.
RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
RESOURCE_PAUSE = 1.0


class PacedServer:
    """Serves ``sock``'s connections (a listening, non-blocking socket: ``bind_unix_socket``'s)
    with ``handler``, at most ``limit`` accepted in any ``window`` seconds; made with a
    running event loop. :meth:`close` stops accepting; connections already accepted go on
    (as :meth:`asyncio.Server.close` leaves them)."""

    def __init__(
        self,
        handler: Handler,
        sock: socket.socket,
        limit: int,
        window: float,
        stream_limit: int = STREAM_LIMIT,
    ) -> None:
        self._handler = handler
        self._sock = sock
        self._window = WindowLimit(limit, window)
        self._stream_limit = stream_limit
        self._connections = TaskSet()
        self._accepting = asyncio.get_running_loop().create_task(self._accept())

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while (wait := self._window.delay(loop.time())) > 0:
                await asyncio.sleep(wait)
            try:
                conn, _ = await loop.sock_accept(self._sock)
            except OSError as exc:
                if exc.errno not in RESOURCE_ERRORS:
                    continue  # that connection went away before it was accepted
                # Out of descriptors or memory: the connections wait in the backlog and
                # this socket keeps being served once there is room again (as asyncio's
                # servers do), instead of its accepting ending for good.
                log.warning("socket.accept_paused", error=exc.strerror or str(exc))
                await asyncio.sleep(RESOURCE_PAUSE)
                continue
            self._window.admit(loop.time())
            self._connections.spawn(self._serve(conn))

    async def _serve(self, conn: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_unix_connection(sock=conn, limit=self._stream_limit)
        except OSError:
            conn.close()
            return
        try:
            await self._handler(reader, writer)
        except Exception:
            writer.close()
            raise

    def close(self) -> None:
        """Stop accepting; the listening socket is closed once the accepting task has
        ended (the event loop may still be watching it until then)."""
        self._accepting.cancel()
        self._accepting.add_done_callback(lambda _: self._sock.close())

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._accepting
