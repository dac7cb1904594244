"""A thin asyncio layer over :mod:`sandbridge.terminals.frames`: await whole frames."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from typing import Any

from sandbridge.exceptions import FrameError
from sandbridge.protocol.jsonline import decode_json
from sandbridge.terminals import frames
from sandbridge.terminals.frames import Frame, FrameDecoder, Kind

# One read from a terminal link: a few maximal frames.
READ_BYTES = 64 * 1024


class FramedStream:
    """Frames from ``reader`` (only ``allowed`` kinds) and to ``writer``."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        allowed: frozenset[Kind],
    ) -> None:
        self.reader = reader
        self.writer = writer
        self._decoder = FrameDecoder(allowed)
        self._pending: deque[Frame] = deque()
        self.bytes_read = 0

    async def next(self) -> Frame | None:
        """The next frame, or ``None`` at a clean end of stream; raises FrameError."""
        while not self._pending:
            data = await self.reader.read(READ_BYTES)
            if not data:
                self._decoder.feed_eof()
                return None
            self.bytes_read += len(data)
            self._pending.extend(self._decoder.feed(data))
        return self._pending.popleft()

    def send(self, kind: Kind, body: bytes) -> None:
        """Queue one frame; dropped if the peer is gone (it would never read it, and
        uvloop raises on a closed transport: a worker's last output, relayed to a client
        that had just left, ended the terminal as ``protocol``)."""
        if self.writer.transport.is_closing():
            return
        self.writer.write(frames.encode(kind, body))

    def send_json(self, kind: Kind, body: dict[str, Any]) -> None:
        self.send(kind, json.dumps(body).encode())

    async def drain(self) -> None:
        await self.writer.drain()

    def abort(self) -> None:
        """Close now, dropping unsent bytes: ``close`` would wait for a peer that may never
        read them."""
        self.writer.transport.abort()

    async def until_peer_closes(self, timeout: float) -> None:
        """Read and drop whatever comes until the peer closes its side, for at most
        ``timeout``: the side that said its last frame leaves the close to the other, whose
        writes meanwhile (a STOP racing the end) then never fail and cost it the frames it
        has not read yet."""
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(timeout):
                while await self.reader.read(READ_BYTES):
                    pass

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


def json_body(frame: Frame) -> dict[str, Any]:
    """A control frame's JSON object; refuse anything else."""
    try:
        body = decode_json(frame.body)
    except ValueError:  # JsonRefused too: deep nesting ([[[...) is refused, not a traceback
        raise FrameError(f"{frame.kind.name} frame is not JSON") from None
    if not isinstance(body, dict):
        raise FrameError(f"{frame.kind.name} frame is not a JSON object")
    return body
