"""The sandbox's requests on one connection, read whole: :class:`RequestStream`.

Every body the bridge serves is a small JSON document (or nothing), so a request is read
whole, at most ``max_body`` bytes (413 past it), before anything is decided: the bridge
never forwards bytes it has not checked. An attach asks for the connection
(``Upgrade: tcp``): llhttp stops at its head, so its body (an exec start's few bytes) is
read by its ``Content-Length`` from what follows, and the rest is the stream's first
bytes. A malformed request is refused (400) with llhttp's reason.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from sandbridge.exceptions import ContainerRefused, HttpError
from sandbridge.protocol.http.parser import (
    MESSAGE_END,
    BodyChunk,
    Event,
    RequestHead,
    RequestReader,
    Upgraded,
)

READ_BYTES = 64 * 1024
# What a client may send while an answer streams to it (a next request, pipelined) before
# the bridge stops reading and ends the connection after the answer.
MAX_AHEAD_BYTES = 64 * 1024
# The one request field passed on besides the body: an image pull's registry login.
REGISTRY_AUTH = b"x-registry-auth"


@dataclass(frozen=True, slots=True)
class ClientRequest:
    """One request, read whole."""

    method: str
    target: str
    body: bytes
    keep_alive: bool
    upgrade: bool
    # After an upgrade: the stream's first bytes, sent on once the engine hands over.
    rest: bytes = b""
    registry_auth: list[tuple[str, str]] = field(default_factory=list)


class RequestStream:
    """Reads ``reader``'s requests one after another (keep-alive)."""

    def __init__(
        self, reader: asyncio.StreamReader, head_timeout: float, body_timeout: float, max_body: int
    ) -> None:
        self._reader = reader
        self._requests = RequestReader()
        self._events: deque[Event] = deque()
        self._head_timeout = head_timeout
        self._body_timeout = body_timeout
        self._max_body = max_body
        self._ended = False

    async def _event(self) -> Event | None:
        while not self._events:
            if self._ended:
                return None
            data = await self._reader.read(READ_BYTES)
            if not data:
                self._ended = True
                return None
            try:
                self._events.extend(self._requests.feed(data))
            except HttpError as exc:
                raise ContainerRefused("request", "malformed-request", str(exc), 400) from None
        return self._events.popleft()

    async def closed(self) -> None:
        """Return when the client closes its side while an answer streams to it (a
        ``docker logs -f`` left with Ctrl-C), or sends more than :data:`MAX_AHEAD_BYTES`
        or malformed bytes meanwhile; what it sends is kept for :meth:`next`. Cancelled,
        it loses nothing."""
        ahead = 0
        while not self._ended:
            data = await self._reader.read(READ_BYTES)
            if not data:
                self._ended = True
                return
            ahead += len(data)
            try:
                self._events.extend(self._requests.feed(data))
            except HttpError:
                return
            if ahead > MAX_AHEAD_BYTES:
                return

    async def next(self) -> ClientRequest | None:
        """The next request, or None when the client closed between requests."""
        try:
            async with asyncio.timeout(self._head_timeout):
                event = await self._event()
        except TimeoutError:
            return None  # an idle connection, or a head that never ends: closed
        if event is None:
            return None
        if not isinstance(event, RequestHead):
            raise ContainerRefused("request", "malformed-request", "no request head", 400)
        try:
            async with asyncio.timeout(self._body_timeout):
                if event.upgrade:
                    return await self._upgrade(event)
                return await self._whole(event)
        except TimeoutError:
            raise ContainerRefused(
                "body", "malformed-request", f"not sent within {self._body_timeout:g} s", 400
            ) from None

    def _too_large(self, size: int) -> None:
        if size > self._max_body:
            raise ContainerRefused("body", "body-size", f"larger than {self._max_body} bytes", 413)

    async def _whole(self, head: RequestHead) -> ClientRequest:
        body = bytearray()
        while True:
            event = await self._event()
            if event is None:
                raise ContainerRefused("body", "malformed-request", "the body ended early", 400)
            if isinstance(event, BodyChunk):
                body += event.data
                self._too_large(len(body))
            elif event is MESSAGE_END:
                return _request(head, bytes(body))

    async def _upgrade(self, head: RequestHead) -> ClientRequest:
        lengths = [v for n, v in head.headers if n.lower() == b"content-length"]
        if any(n.lower() == b"transfer-encoding" for n, _ in head.headers) or len(lengths) > 1:
            raise ContainerRefused("body", "malformed-request", "an upgrade's body is sized", 400)
        size = int(lengths[0]) if lengths else 0
        self._too_large(size)
        data = bytearray()
        while (event := await self._event()) is not None and not isinstance(event, Upgraded):
            pass
        if isinstance(event, Upgraded):
            data += event.trailing
        while len(data) < size:
            more = await self._reader.read(READ_BYTES)
            if not more:
                raise ContainerRefused("body", "malformed-request", "the body ended early", 400)
            data += more
        return _request(head, bytes(data[:size]), bytes(data[size:]))


def _request(head: RequestHead, body: bytes, rest: bytes = b"") -> ClientRequest:
    auth = [
        ("X-Registry-Auth", value.decode("latin-1"))
        for name, value in head.headers
        if name.lower() == REGISTRY_AUTH
    ]
    return ClientRequest(
        head.method.decode("latin-1"),
        head.target.decode("latin-1"),
        body,
        head.keep_alive,
        head.upgrade,
        rest,
        auth[:1],
    )
