"""The bridge's side toward the owner's engine: one Unix connection per request.

A request is sent with a head the bridge writes itself (never the client's bytes): the
method, the checked target, ``Host: docker``, the body's type and length, and, for an
attach, the ``Upgrade: tcp`` that asks the engine to hand the connection over. Answers
come back three ways (:class:`AnswerStream`): streamed chunk by chunk (``relay``: logs
that follow a container, a long wait, an image pull's progress; memory bounded by one
read), read whole when the bridge must look inside (``whole``, at most a bound: a created
object's id, the engine's info), or, after a hijacked attach's head, as bytes both ways
(:func:`splice`), each direction's end passed on as a half close.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from sandbridge.aio.tasks import first_done, running
from sandbridge.exceptions import HttpError
from sandbridge.protocol.http.forwarding import LAST_CHUNK, encode_chunk, reason_phrase
from sandbridge.protocol.http.parser import (
    MESSAGE_END,
    BodyChunk,
    Event,
    ResponseHead,
    ResponseReader,
    Upgraded,
)

READ_BYTES = 64 * 1024
# How long the engine may take to accept a connection and answer a request's head: a
# busy engine answers in milliseconds; a wait or a followed log sends its head at once.
ENGINE_HEAD_TIMEOUT = 60.0
# The engine's answer headers passed back; framing is the bridge's own.
ANSWER_FIELDS = frozenset(
    {b"content-type", b"api-version", b"docker-experimental", b"ostype", b"server", b"date",
     b"cache-control", b"pragma", b"libpod-api-version", b"libpod-buildah-version"}
)  # fmt: skip


async def open_request(  # noqa: PLR0913  (keyword-only: how the request goes)
    engine: Path, method: str, target: str, body: bytes, *, hijack: bool = False,
    extra: tuple[tuple[str, str], ...] = (),
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:  # fmt: skip
    """Connect to ``engine`` and send the request; the connection, for its answer."""
    async with asyncio.timeout(ENGINE_HEAD_TIMEOUT):
        reader, writer = await asyncio.open_unix_connection(str(engine), limit=READ_BYTES)
    lines = [f"{method} {target} HTTP/1.1", "Host: docker", "User-Agent: sandbridge"]
    if body or method in ("POST", "PUT"):
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in extra]
    lines += ["Connection: Upgrade", "Upgrade: tcp"] if hijack else ["Connection: close"]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
    await writer.drain()
    return reader, writer


async def close(writer: asyncio.StreamWriter) -> None:
    """Close a connection, waiting a little for its last bytes."""
    writer.close()
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(1.0):
            await writer.wait_closed()


def answer_head(status: int, headers: list[tuple[bytes, bytes]], framing: bytes) -> bytes:
    """An answer's head toward the client: the status, the fields it may see, and the
    bridge's own framing line (``Content-Length: N``, ``Transfer-Encoding: chunked``,
    or empty when the answer has no body)."""
    lines = [b"HTTP/1.1 %d " % status + reason_phrase(status)]
    lines += [name + b": " + value for name, value in headers if name.lower() in ANSWER_FIELDS]
    if framing:
        lines.append(framing)
    return b"\r\n".join(lines) + b"\r\n\r\n"


class AnswerStream:
    """The engine's answer on one connection, read as events."""

    def __init__(self, reader: asyncio.StreamReader, method: str) -> None:
        self.reader = reader
        self.method = method
        self._answers = ResponseReader(method.encode())
        # Events read past the final head, not yet relayed.
        self.pending: list[Event] = []

    async def head(self, hijack: bool = False) -> tuple[ResponseHead, bytes, bool]:
        """The final head; with ``hijack``, also the bytes after it and whether the
        engine handed the connection over (101, or 200 with a raw stream)."""
        async with asyncio.timeout(ENGINE_HEAD_TIMEOUT):
            while True:
                data = await self.reader.read(READ_BYTES)
                events = self._answers.feed(data) if data else self._answers.feed_eof()
                for index, event in enumerate(events):
                    if not isinstance(event, ResponseHead):
                        continue
                    after = events[index + 1 :]
                    if hijack and (
                        event.status == 101 or (event.status == 200 and not _framed(event))
                    ):
                        rest = b"".join(
                            e.trailing if isinstance(e, Upgraded) else e.data
                            for e in after
                            if isinstance(e, Upgraded | BodyChunk)
                        )
                        return event, rest, True
                    if event.status >= 200:
                        self.pending = after
                        return event, b"", False
                if not data:
                    raise HttpError(502, "the engine closed the connection without an answer")

    async def relay(self, head: ResponseHead, client: asyncio.StreamWriter) -> None:
        """Stream the answer after ``head`` to ``client``, each piece as it comes."""
        chunked = False
        framing = b""
        lengths = [v for n, v in head.headers if n.lower() == b"content-length"]
        if lengths and not any(n.lower() == b"transfer-encoding" for n, _ in head.headers):
            framing = b"Content-Length: " + lengths[0]
        elif self.method != "HEAD" and head.status not in (204, 304):
            framing, chunked = b"Transfer-Encoding: chunked", True
        client.write(answer_head(head.status, head.headers, framing))
        await client.drain()
        events, self.pending = self.pending, []
        while True:
            for event in events:
                if isinstance(event, BodyChunk):
                    client.write(encode_chunk(event.data) if chunked else event.data)
                    await client.drain()
                elif event is MESSAGE_END:
                    if chunked:
                        client.write(LAST_CHUNK)
                        await client.drain()
                    return
            data = await self.reader.read(READ_BYTES)
            events = self._answers.feed(data) if data else self._answers.feed_eof()

    async def whole(self, head: ResponseHead, max_bytes: int) -> bytes:
        """The answer's body after ``head``, read whole: at most ``max_bytes`` (past
        it: 502, the client told so)."""
        body = bytearray()
        events, self.pending = self.pending, []
        async with asyncio.timeout(ENGINE_HEAD_TIMEOUT):
            while True:
                for event in events:
                    if isinstance(event, BodyChunk):
                        body += event.data
                        if len(body) > max_bytes:
                            raise HttpError(502, f"the engine's answer is over {max_bytes} bytes")
                    elif event is MESSAGE_END:
                        return bytes(body)
                data = await self.reader.read(READ_BYTES)
                events = self._answers.feed(data) if data else self._answers.feed_eof()


def _framed(head: ResponseHead) -> bool:
    return any(n.lower() in (b"content-length", b"transfer-encoding") for n, _ in head.headers)


async def splice(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    engine: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    first_in: bytes,
    first_out: bytes,
) -> None:
    """Copy bytes both ways until the engine's side ends (the container's output is
    over); the client's end of its input is passed on as a half close."""

    async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter, first: bytes) -> None:
        if first:
            sink.write(first)
            await sink.drain()
        while data := await source.read(READ_BYTES):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            with contextlib.suppress(OSError):
                sink.write_eof()

    async with running(
        copy(client[0], engine[1], first_in), copy(engine[0], client[1], first_out)
    ) as (
        inbound,
        outbound,
    ):
        done = await first_done(inbound, outbound)
        if inbound in done and outbound not in done:
            await asyncio.wait([outbound])
