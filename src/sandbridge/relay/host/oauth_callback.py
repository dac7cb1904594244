"""One OAuth login's callback, carried from the owner's loopback to the sandbox's
(docs/open.md, "Logins (OAuth callbacks)").

A login inside the sandbox listens on its loopback ``PORT`` and opens an authorize URL
whose ``redirect_uri`` is ``http://127.0.0.1:PORT/PATH`` (or ``localhost``, ``[::1]``).
After the login the owner's browser requests that URL on the *owner's* loopback. Once
the owner approved the open, :class:`OAuthCallback` listens on exactly that address and
port of the host, for :data:`CALLBACK_DEADLINE` at most, and carries **one** request
there to the sandbox's listener on the same port, then closes:

- a connection from another local user is closed at accept, unanswered
  (:mod:`.local_peer`), as an app's listener does;
- the request head is read strictly (the relay's parser); only ``GET`` of exactly the
  redirect's path, with the redirect's own ``Host``, no body, is carried: anything else
  is refused (``404``/``400``/``405``) and the callback still awaited, so a stray request
  (a favicon, a page's probe) does not spend it; past :data:`MAX_REFUSED` refusals the
  listener closes;
- the first matching request closes the listener at once (a second finds nothing
  listening); its query (the code, the state) is passed on byte for byte and never
  logged; the browser's cookies for the owner's loopback are not passed on;
- the sandbox's answer goes back with a normalised head: its status, ``Content-Type``,
  ``Location`` and ``Cache-Control`` only (no ``Set-Cookie``: the owner's loopback
  cookies are every local service's), under ``Content-Security-Policy: sandbox`` (its
  page runs no script on the owner's loopback origin) and ``Referrer-Policy:
  no-referrer`` (the URL holds the code); the body is streamed through.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import errno
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sandbridge import log
from sandbridge.aio.tasks import TaskSet
from sandbridge.exceptions import HttpError, SandbridgeError
from sandbridge.protocol.http.forwarding import error_response, reason_phrase
from sandbridge.protocol.http.parser import (
    MESSAGE_END,
    BodyChunk,
    RequestHead,
    RequestReader,
    ResponseHead,
    ResponseReader,
)
from sandbridge.protocol.oauth_redirect import LoopbackRedirect
from sandbridge.relay.host import local_peer
from sandbridge.relay.host.channel import Channel
from sandbridge.relay.host.open_settings import CALLBACK_DEADLINE

# A browser sends its request head at once; a connection silent this long is closed.
HEAD_TIMEOUT = 15.0
# The sandbox's login answers its callback with a short page at once; a login that has
# said nothing for this long (between any two reads) is cut off with a 504, and a
# browser that has taken nothing of the answer for this long is dropped.
RESPONSE_TIMEOUT = 30.0
# Requests that are not the callback (a favicon, a probe) refused before the listener
# gives up: a browser makes one or two; a page hammering the port makes many.
MAX_REFUSED = 16
# Connections served at once, waiting for their heads: a browser opens one or two.
MAX_CONNECTIONS = 8
_READ_SIZE = 65536
# The response fields passed back to the owner's browser; every other is dropped.
_KEPT_FIELDS = (b"content-type", b"location", b"cache-control")
_SAFETY_FIELDS = (
    b"Content-Security-Policy: sandbox",
    b"Referrer-Policy: no-referrer",
    b"X-Content-Type-Options: nosniff",
    b"Connection: close",
)

# Opens a connection to the sandbox's loopback ``port`` (the session's upstream
# connector); ``None``: the sandbox's shim speaks v1 only, which carries no callback.
OpenSandboxPort = Callable[[int], Awaitable[tuple[Channel, bytes] | None]]


class Ending(enum.Enum):
    """How a callback's listener ended (the ``oauth_callback.closed`` event's ``how``)."""

    RELAYED = "relayed"  # the callback reached the sandbox, its answer the browser
    FAILED = "failed"  # the callback came, the sandbox's listener did not answer it
    EXPIRED = "expired"  # no callback within the deadline
    REFUSED = "refused"  # too many requests that were not the callback
    CLOSED = "closed"  # the session ended first


@dataclass(frozen=True, slots=True)
class CallbackStatus:
    """What the dashboard and ``status`` show of one callback (never its query)."""

    host: str
    port: int
    path: str
    authorize_host: str
    state: str  # "waiting" or an :class:`Ending` value


def check_callback(head: RequestHead, redirect: LoopbackRedirect) -> None:
    """Whether ``head`` is the login's callback: ``GET`` of exactly the redirect's path,
    its ``Host``, no body. Raises :class:`HttpError` with the refusal otherwise."""
    hosts = [value for name, value in head.headers if name.lower() == b"host"]
    if len(hosts) != 1 or hosts[0].lower() not in redirect.authorities:
        shown = b", ".join(hosts).decode("ascii", "replace")[:120]
        raise HttpError(
            400, f"Host {shown!r} is not this callback's {redirect.host}:{redirect.port}"
        )
    if head.method != b"GET":
        raise HttpError(405, f"a login's callback is a GET, not {head.method.decode()[:20]}")
    path = head.target.partition(b"?")[0]
    if path != redirect.path.encode():
        raise HttpError(404, f"this port awaits a login's callback on {redirect.path} only")
    for name, value in head.headers:
        if name.lower() == b"transfer-encoding" or (
            name.lower() == b"content-length" and value.strip() != b"0"
        ):
            raise HttpError(400, "a login's callback has no body")


def callback_request(head: RequestHead, redirect: LoopbackRedirect) -> bytes:
    """The request sent to the sandbox's listener: the target as the browser sent it,
    the redirect's ``Host``, and nothing of the owner's browser but what a login's page
    needs to answer (its language, what it accepts); never a cookie."""
    lines = [
        b"GET " + head.target + b" HTTP/1.1",
        b"Host: %s:%d" % (redirect.host.encode(), redirect.port),
    ]
    for name, value in head.headers:
        if name.lower() in (b"user-agent", b"accept", b"accept-language"):
            lines.append(name + b": " + value)
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def browser_head(response: ResponseHead) -> bytes:
    """The sandbox's response head as the owner's browser gets it (module docstring)."""
    status = response.status
    lines = [b"HTTP/1.1 %d " % status + reason_phrase(status)]
    for name, value in response.headers:
        if name.lower() in _KEPT_FIELDS:
            lines.append(name + b": " + value)
    lines += _SAFETY_FIELDS
    return b"\r\n".join(lines) + b"\r\n\r\n"


class OAuthCallback:
    """Awaits one login's callback on the host's loopback and carries it to the sandbox."""

    def __init__(
        self,
        redirect: LoopbackRedirect,
        open_sandbox: OpenSandboxPort,
        authorize_host: str,
        deadline: float = CALLBACK_DEADLINE,
        on_end: Callable[[OAuthCallback], None] | None = None,
    ) -> None:
        self.redirect = redirect
        self.authorize_host = authorize_host
        self.deadline = deadline
        self._open_sandbox = open_sandbox
        self._on_end = on_end
        self._server: asyncio.Server | None = None
        self._more_servers: list[asyncio.Server] = []  # localhost's ::1
        self._sockets: list[socket.socket] = []
        self._tasks = TaskSet()
        self._connections: set[asyncio.StreamWriter] = set()
        self._refused = 0
        self.ending: Ending | None = None
        self.done = asyncio.Event()

    @property
    def status(self) -> CallbackStatus:
        state = "waiting" if self.ending is None else self.ending.value
        r = self.redirect
        return CallbackStatus(r.host, r.port, r.path, self.authorize_host, state)

    def bind(self) -> None:
        """Take the redirect's addresses and port now (before the browser is sent to
        the authorize page); :class:`OSError` (``EADDRINUSE``: the port is taken on the
        host) if any of them cannot be had. ``localhost`` is both loopback addresses; a
        host without IPv6 has only 127.0.0.1 for it."""
        local_peer.shared_owners()  # its netlink socket, before any connection
        sockets: list[socket.socket] = []
        try:
            for address in self.redirect.addresses:
                family = socket.AF_INET6 if ":" in address else socket.AF_INET
                try:
                    sock = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
                except OSError as exc:
                    if family == socket.AF_INET6 and exc.errno == errno.EAFNOSUPPORT:
                        continue  # no IPv6 here: a browser finds localhost on 127.0.0.1
                    raise
                sockets.append(sock)
                # Linux's SO_REUSEADDR takes over TIME_WAIT only (a retried login's port
                # is free at once), never a port another socket listens on.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    sock.bind((address, self.redirect.port))
                except OSError as exc:
                    if family == socket.AF_INET6 and exc.errno == errno.EADDRNOTAVAIL:
                        sockets.pop().close()  # ::1 switched off: 127.0.0.1 only
                        continue
                    raise
                sock.listen(MAX_CONNECTIONS)
                sock.setblocking(False)
        except BaseException:
            for sock in sockets:
                sock.close()
            raise
        self._sockets = sockets

    async def start(self) -> None:
        """Bind (unless :meth:`bind` did) and serve on the bound sockets."""
        if not self._sockets:
            self.bind()
        self._server = await asyncio.start_server(self._serve, sock=self._sockets[0])
        for sock in self._sockets[1:]:
            self._more_servers.append(await asyncio.start_server(self._serve, sock=sock))
        log.info(
            "oauth_callback.listening",
            host=self.redirect.host,
            port=self.redirect.port,
            path=self.redirect.path,
            authorize_host=self.authorize_host,
            deadline=self.deadline,
        )

    async def run(self) -> None:
        """Serve (see :meth:`start`), wait for the callback or the deadline; then close
        everything."""
        try:
            if self._server is None:
                await self.start()
            async with asyncio.timeout(self.deadline):
                await self.done.wait()
        except TimeoutError:
            self._end(Ending.EXPIRED)
        finally:
            if self.ending is None:
                self._end(Ending.CLOSED)
            await self._close()

    def _end(self, ending: Ending) -> None:
        if self.ending is not None:
            return
        self.ending = ending
        self._stop_listening()  # a second or late callback finds nothing listening
        log.info("oauth_callback.closed", port=self.redirect.port, how=ending.value)
        self.done.set()
        if self._on_end is not None:
            self._on_end(self)

    def _stop_listening(self) -> None:
        for server in self._servers():
            server.close()
        for sock in self._sockets:
            sock.close()  # bound but never served (the session ended first)

    def _servers(self) -> list[asyncio.Server]:
        return ([] if self._server is None else [self._server]) + self._more_servers

    async def _close(self) -> None:
        for writer in list(self._connections):
            writer.transport.abort()
        # The callback's own answer may still be on its way to the browser.
        await self._tasks.close(grace=HEAD_TIMEOUT)
        for server in self._servers():
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        local = writer.get_extra_info("sockname")
        peer = local_peer.owners_peer(writer.transport, self.redirect.port, local[:2])
        if peer is None or self.ending is not None or len(self._connections) >= MAX_CONNECTIONS:
            writer.transport.abort()  # another user's, or not awaited any more: no answer
            return
        self._connections.add(writer)
        with self._tasks.current():
            try:
                await self._exchange(reader, writer)
            except (OSError, TimeoutError, HttpError):
                writer.transport.abort()
            finally:
                self._connections.discard(writer)
                writer.close()
                try:
                    async with asyncio.timeout(HEAD_TIMEOUT):
                        await writer.wait_closed()
                except (OSError, TimeoutError):
                    writer.transport.abort()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HEAD_TIMEOUT):
                head = await _read_head(reader)
            check_callback(head, self.redirect)
        except HttpError as exc:
            await self._refuse(writer, exc)
            return
        if self.ending is not None:
            writer.transport.abort()  # another connection's callback came first
            return
        self._end_listening(writer)
        try:
            relayed = await self._relay(head, writer)
        finally:
            self._end(Ending.RELAYED if relayed else Ending.FAILED)

    def _end_listening(self, callback: asyncio.StreamWriter) -> None:
        """The callback is here: nothing else is accepted from now on, and the other
        connections (still without a head) are dropped."""
        self._stop_listening()
        self._connections.discard(callback)
        for writer in list(self._connections):
            writer.transport.abort()
        log.info("oauth_callback.arrived", port=self.redirect.port)  # never the query

    async def _refuse(self, writer: asyncio.StreamWriter, exc: HttpError) -> None:
        self._refused += 1
        log.warning(
            "oauth_callback.request_refused",
            port=self.redirect.port,
            status=exc.status,
            reason=str(exc),
        )
        writer.write(error_response(exc.status, str(exc)))
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(HEAD_TIMEOUT):
                await writer.drain()
        if self._refused >= MAX_REFUSED:
            self._end(Ending.REFUSED)

    async def _relay(self, head: RequestHead, writer: asyncio.StreamWriter) -> bool:
        """Carry the callback; whether the sandbox answered it."""
        port = self.redirect.port
        try:
            opened = await self._open_sandbox(port)
        except (SandbridgeError, OSError, TimeoutError) as exc:  # unreachable: a 502
            return await self._failed(writer, 502, f"nothing answers on port {port} inside: {exc}")
        if opened is None:
            return await self._failed(writer, 502, "the sandbox's shim speaks v1 only")
        channel, pending = opened
        try:
            channel.write(callback_request(head, self.redirect))
            reader = ResponseReader(b"GET")
            data, started = pending, False
            while True:
                if not data:
                    async with asyncio.timeout(RESPONSE_TIMEOUT):
                        data = await channel.read()
                events = reader.feed(data) if data else reader.feed_eof()
                for event in events:
                    if isinstance(event, ResponseHead):
                        writer.write(browser_head(event))
                        started = True
                    elif isinstance(event, BodyChunk):
                        writer.write(event.data)
                    if event is MESSAGE_END:
                        await _drain(writer)
                        log.info("oauth_callback.relayed", port=port)
                        return True
                await _drain(writer)
                if not data:
                    raise HttpError(502, "the sandbox's listener closed before answering")
                data = b""
        except (HttpError, OSError, TimeoutError) as exc:
            if started:
                raise  # a response begun cannot be replaced: the connection is cut
            status = exc.status if isinstance(exc, HttpError) else 504
            return await self._failed(writer, status, f"the sandbox's answer failed: {exc}")
        finally:
            channel.close()

    async def _failed(self, writer: asyncio.StreamWriter, status: int, why: str) -> bool:
        log.warning("oauth_callback.failed", port=self.redirect.port, status=status, reason=why)
        writer.write(error_response(status, why))
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(HEAD_TIMEOUT):
                await writer.drain()
        return False

    async def close(self) -> None:
        """End it now (the session ends)."""
        self._end(Ending.CLOSED)
        await self._close()


async def _drain(writer: asyncio.StreamWriter) -> None:
    """Wait until the browser takes what was written, for :data:`RESPONSE_TIMEOUT` at
    most: a browser that reads nothing does not hold the callback open."""
    async with asyncio.timeout(RESPONSE_TIMEOUT):
        await writer.drain()


async def _read_head(reader: asyncio.StreamReader) -> RequestHead:
    parser = RequestReader()
    while True:
        data = await reader.read(_READ_SIZE)
        if not data:
            raise HttpError(400, "the connection closed before a request head")
        for event in parser.feed(data):
            if isinstance(event, RequestHead):
                return event
