"""The registration server on ``relay.sock``: one JSON request, one JSON answer.

Three requests share the socket (``protocol/registration.py``'s ``REQUEST_TYPES``): the
contract's ``register``, auto-publish's ``unregister``, and sandbridge's own ``open`` (the
sandbox asks the host to open a URL: docs/open.md), served when an ``open_url`` handler
is given.

Every refusal is ``{"ok":false,"error":"..."}`` naming the bad value; a client that
sends too much or nothing at all is answered (or dropped) within the read timeout, and
never blocks other registrations.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sandbridge import log
from sandbridge.aio.before_loop import bind_unix_socket
from sandbridge.aio.paced_server import PacedServer
from sandbridge.aio.unix_sockets import read_line
from sandbridge.exceptions import RegistrationError, WireError
from sandbridge.protocol.auto_registration import UnregisterRequest, encode_unregister_ok
from sandbridge.protocol.limits import (
    HTML_READ_TIMEOUT,
    MAX_PENDING_REGISTRATIONS,
    MAX_REGISTRATION_BYTES,
    REGISTRATION_READ_TIMEOUT,
    RELAY_SOCKET_RATE,
)
from sandbridge.protocol.open_request import HtmlTarget, OpenTarget, encode_open_ok
from sandbridge.protocol.registration import (
    OPEN,
    REQUEST_TYPES,
    RegisterRequest,
    encode_register_error,
    encode_register_ok,
    parse_request,
)

if TYPE_CHECKING:
    from sandbridge.relay.host.app import App

Register = Callable[[RegisterRequest], Awaitable["App"]]
# Closes an auto-published app; raises RegistrationError to refuse.
Unregister = Callable[[UnregisterRequest], Awaitable[None]]
# The page's bytes of an HtmlTarget (b"" for any other target), read on demand.
ReadHtml = Callable[[], Awaitable[bytes]]
# Carries out one open request: the URL it opened (or showed) and what it did with it.
# It calls ReadHtml only once it has admitted the request: the page of a refused one
# (past the rate limit, past the snapshot limit) is never read, nor waited for, so
# memory for pages is bounded by the requests admitted, not by connections.
OpenUrl = Callable[[OpenTarget, ReadHtml], Awaitable[tuple[str, str]]]


class RegistrationServer:
    """Serves registrations on a Unix socket, calling ``register`` for each valid one
    (and ``unregister`` for each valid unregister message, if given)."""

    def __init__(
        self,
        path: Path,
        register: Register,
        unregister: Unregister | None = None,
        open_url: OpenUrl | None = None,
        *,
        read_timeout: float = REGISTRATION_READ_TIMEOUT,
    ) -> None:
        self.path = path
        # How long a connection may take to send its request (a test shortens it).
        self.read_timeout = read_timeout
        self._register = register
        self._unregister = unregister
        self._open_url = open_url
        # The request types answered here: every one relay.sock knows, open only with a
        # handler (a refusal of any other type lists these).
        self._accepted = tuple(t for t in REQUEST_TYPES if t != OPEN or open_url is not None)
        self._server: PacedServer | None = None
        # Connections still sending their request, oldest first, with their read timeout.
        self._pending: collections.OrderedDict[object, asyncio.Timeout] = collections.OrderedDict()
        self._evicted: set[object] = set()

    async def start(self) -> None:
        sock = bind_unix_socket(self.path)
        self._server = PacedServer(self._serve, sock, RELAY_SOCKET_RATE, 1.0)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def _make_room(self) -> None:
        """At the cap, the connection that has waited longest for its request is dropped
        (with an answer saying so): a flood of silent connections cannot lock out a
        helper that sends its request at once."""
        while len(self._pending) >= MAX_PENDING_REGISTRATIONS:
            key, timeout = self._pending.popitem(last=False)
            self._evicted.add(key)
            timeout.reschedule(asyncio.get_running_loop().time())

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        key = object()
        self._make_room()
        try:
            try:
                async with asyncio.timeout(self.read_timeout) as timeout:
                    self._pending[key] = timeout
                    line, rest = await read_line(reader, MAX_REGISTRATION_BYTES)
                self._pending.pop(key, None)
                answer = await self._answer(line, rest, reader)
            except TimeoutError:
                if key in self._evicted:
                    answer = encode_register_error(
                        f"dropped: more than {MAX_PENDING_REGISTRATIONS} registrations were "
                        "waiting for their request"
                    )
                else:
                    answer = encode_register_error(
                        f"no complete request within {self.read_timeout:g} s"
                    )
            except (RegistrationError, WireError) as exc:
                answer = encode_register_error(str(exc))
            if answer.startswith(b'{"ok":false'):
                log.debug("registration.refused", answer=answer.decode().strip())
            writer.write(answer)
            await writer.drain()
        except OSError:
            pass
        finally:
            self._pending.pop(key, None)
            self._evicted.discard(key)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _answer(self, line: bytes, rest: bytes, reader: asyncio.StreamReader) -> bytes:
        """The success answer to one request line (and what follows it); refusals raise."""
        request = parse_request(line, self._accepted)
        if isinstance(request, UnregisterRequest):
            return await self._answer_unregister(request)
        if isinstance(request, RegisterRequest):
            app = await self._register(request)
            return encode_register_ok(app.host_port, app.base_path, app.url)
        assert self._open_url is not None  # open is accepted only with a handler
        read_html: ReadHtml = no_html
        if isinstance(request, HtmlTarget):
            read_html = functools.partial(_read_html, reader, rest, request.size)
        url, action = await self._open_url(request, read_html)
        return encode_open_ok(url, action)

    async def _answer_unregister(self, request: UnregisterRequest) -> bytes:
        if self._unregister is None:
            raise RegistrationError(
                "unregister is not served here: this session does not auto-publish"
            )
        await self._unregister(request)
        return encode_unregister_ok(request.host_port)


async def no_html() -> bytes:
    """The :data:`ReadHtml` of a request that carries no page."""
    return b""


async def _read_html(reader: asyncio.StreamReader, rest: bytes, size: int) -> bytes:
    """The ``size`` bytes of HTML after the request line (its size already capped)."""
    if len(rest) > size:
        raise RegistrationError(f"more than the {size} bytes of HTML announced were sent")
    try:
        async with asyncio.timeout(HTML_READ_TIMEOUT):
            return rest + await reader.readexactly(size - len(rest))
    except asyncio.IncompleteReadError as exc:
        raise RegistrationError(
            f"the connection closed after {len(rest) + len(exc.partial)} of the {size} bytes "
            "of HTML announced"
        ) from None
    except TimeoutError:
        raise RegistrationError(
            f"the {size} bytes of HTML announced did not arrive within {HTML_READ_TIMEOUT:g} s"
        ) from None
