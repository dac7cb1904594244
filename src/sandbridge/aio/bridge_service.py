"""The Unix socket of one of the agents' bridges (the ssh agent's, the clipboard's):
:class:`BridgeService`.

Each bridge's socket is reached by the sandbox, so each is served the same way: accepts
paced (:class:`PacedServer`), every open connection owned and ended at :meth:`close`
(:class:`OpenConnections`), at most ``max_open`` served at once (one more is told so by
``on_full`` and closed), and each connection, once served, flushed and closed within
:data:`CLOSE_TIMEOUT`: a client that never reads its answers holds its slot that long at
most. The bridge writes only what it answers (``serve``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sandbridge import log
from sandbridge.aio.before_loop import bind_unix_socket
from sandbridge.aio.open_connections import OpenConnections
from sandbridge.aio.paced_server import Handler, PacedServer
from sandbridge.exceptions import WireError

# How long a served connection's last answers may take to leave before it is cut.
CLOSE_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class BridgeLimits:
    """How much of the host one bridge's socket may take: ``rate`` connections accepted a
    second, ``max_open`` served at once."""

    rate: int
    max_open: int


class BridgeService:
    """Serves ``path`` (0600) with ``serve`` within ``limits``. A connection that a client
    left or that broke the wire (:class:`WireError`) ends as expected, logged as
    ``NAME.closed`` at debug."""

    def __init__(
        self,
        path: Path,
        serve: Handler,
        limits: BridgeLimits,
        on_full: Callable[[asyncio.StreamWriter], None],
        name: str,
    ) -> None:
        self.path = path
        self._serve_one = serve
        self._limits = limits
        self._on_full = on_full
        self._event = f"{name}.closed"
        self._server: PacedServer | None = None
        self._open = OpenConnections()
        self._active = 0

    def start(self) -> None:
        """Listen on :attr:`path`."""
        self._server = PacedServer(self._serve, bind_unix_socket(self.path), self._limits.rate, 1.0)

    async def close(self) -> None:
        """Stop accepting, end every open connection, and remove the socket (a runtime
        dir another runtime mounts outlives the session: ``sandbridge host``'s next
        session binds the same path)."""
        if self._server is not None:
            self._server.close()
        await self._open.close()
        if self._server is not None:
            await self._server.wait_closed()
            with contextlib.suppress(OSError):
                self.path.unlink()

    def track(self, writer: asyncio.StreamWriter) -> contextlib.AbstractContextManager[object]:
        """Track another end of a connection (an upstream the bridge opened) while the
        block runs, so :meth:`close` ends it too."""
        return self._open.track(writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self._open.handler(writer):
            self._active += 1
            try:
                if self._active > self._limits.max_open:
                    self._on_full(writer)
                    return
                await self._serve_one(reader, writer)
            except (ConnectionError, WireError) as exc:
                log.debug(self._event, reason=str(exc))
            finally:
                writer.close()
                try:
                    async with asyncio.timeout(CLOSE_TIMEOUT):
                        await writer.wait_closed()
                except TimeoutError:
                    writer.transport.abort()
                except OSError:
                    pass
                self._active -= 1
