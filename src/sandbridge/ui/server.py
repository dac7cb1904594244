"""The dashboard's HTTP server: one loopback listener, the page, its events and actions.

Built on the relay's own strict HTTP parser (``protocol/http/parser.py``) over asyncio
streams rather than a web framework: the dashboard needs five routes, and its first check
happens at accept (is this connection the owner's? ``relay/host/local_peer.py``), which a
framework hides. One request per connection (``Connection: close``); the live tables
arrive as Server-Sent Events on ``/events``.

One feed per dashboard, whatever the number of tabs: while any event stream is open, it
reads the tables when told something changed (:meth:`Dashboard.notify`: the daemon calls
it on its sessions' events; a watch of the registry and the far machines' records calls it
on theirs, ``places/registry_watch.py``) or ``refresh`` seconds after the last read
(changes that come with time, as an egress request expiring), and each stream sends what
changed. :func:`build_dashboard` makes the server; whoever hosts it (the daemon, or
``sandbridge ui`` itself when no daemon runs) starts and closes it in its own event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from sandbridge import log
from sandbridge.aio.tasks import TaskSet, running
from sandbridge.exceptions import ControlError, HttpError, JsonRefused, SandbridgeError
from sandbridge.places.registry import SESSIONS
from sandbridge.places.registry_watch import RegistryWatch
from sandbridge.places.remotes import REMOTES
from sandbridge.protocol.http.fields import field_values
from sandbridge.protocol.http.parser import MESSAGE_END, BodyChunk, RequestHead, RequestReader
from sandbridge.protocol.jsonline import decode_json
from sandbridge.relay.host.local_peer import is_owners_connection, shared_owners
from sandbridge.ui import state
from sandbridge.ui.access import Access, Login, Refuse, Serve

# An action's JSON body is a few fields; anything bigger is not the page's.
MAX_BODY_BYTES = 16 * 1024
# A client has this long to send its request: a loopback page sends it at once.
HEAD_TIMEOUT = 10.0
# Connections at once: a few tabs, each with one event stream and a request or two. Past
# it, the oldest connection still sending its request is closed to make room: a
# ``--network full`` sandbox runs as the owner and passes the peer check, and holding
# every place with connections that send nothing kept the owner's page out (a browser
# sends its request at once, so its connections are never the oldest still sending).
MAX_CONNECTIONS = 32
# Event streams at once: a few tabs.
MAX_STREAMS = 8
# Without a word of a change, the tables are re-read this often: what changes with time
# (an egress request expiring). Every other change is told (the daemon's sessions) or
# seen in the registry (places/registry_watch.py), and shows at once.
REFRESH_INTERVAL = 5.0
# However many changes are told (a sandbox flooding its egress gate), the tables are read
# at most once in this long: ten reads a second, and a change still shows at once.
MIN_READ_GAP = 0.1
# A comment line this often keeps an idle stream from looking dead to proxies and tabs.
KEEPALIVE_INTERVAL = 15.0

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = (
    ("Content-Security-Policy", CSP),
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
)
STATIC = {
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
    "/icon.svg": ("icon.svg", "image/svg+xml"),
}
CSRF_PLACEHOLDER = "{{CSRF}}"
REASONS = {
    200: "OK", 303: "See Other", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
    404: "Not Found", 405: "Method Not Allowed", 409: "Conflict", 413: "Content Too Large",
    421: "Misdirected Request", 503: "Service Unavailable",
}  # fmt: skip

Snapshot = Callable[[], Awaitable[dict[str, Any]]]
Action = Callable[[dict[str, Any]], dict[str, Any]]


async def _polled_snapshot() -> dict[str, Any]:
    """Every session asked over its control socket, in a thread (they block)."""
    return await asyncio.to_thread(state.snapshot)


def _static(name: str) -> bytes:
    return (resources.files("sandbridge.ui") / "static" / name).read_bytes()


def response_head(
    status: int, content_type: str, length: int | None, extra: tuple[tuple[str, str], ...] = ()
) -> bytes:
    """A response head with the dashboard's security headers (``length`` None: the body
    runs until the connection closes, as an event stream does)."""
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}"]
    lines += [f"{name}: {value}" for name, value in (*SECURITY_HEADERS, *extra)]
    lines += [f"Content-Type: {content_type}", "Connection: close"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def response(
    status: int, body: bytes, content_type: str, extra: tuple[tuple[str, str], ...] = ()
) -> bytes:
    """A complete response with the dashboard's security headers."""
    return response_head(status, content_type, len(body), extra) + body


def _json(status: int, value: object) -> bytes:
    return response(status, json.dumps(value).encode(), "application/json")


def _refusal(status: int, reason: str) -> bytes:
    return response(status, reason.encode() + b"\n", "text/plain; charset=utf-8")


class Dashboard:
    """The dashboard on 127.0.0.1; :meth:`start` listens, :meth:`close` ends everything."""

    def __init__(
        self,
        snapshot: Snapshot = _polled_snapshot,
        action: Action = state.act,
        refresh: float = REFRESH_INTERVAL,
    ) -> None:
        self._snapshot = snapshot
        self._action = action
        self._refresh = refresh
        self._server: asyncio.Server | None = None
        self._handlers = TaskSet()
        # The connections still sending their request, oldest first.
        self._reading: dict[asyncio.StreamWriter, None] = {}
        self._streams = 0
        self.access = Access(port=0)
        self._page = b""
        # The feed: the tables last read, their version, and the event each stream waits
        # on (replaced, after being set, at each new version).
        self._feed = TaskSet()
        self._feeding = False
        self._changed = asyncio.Event()
        self._tables = b""
        self._version = 0
        self._published = asyncio.Event()

    def notify(self) -> None:
        """Something the tables show changed: read them again now (no-op without a tab)."""
        self._changed.set()

    @property
    def port(self) -> int:
        return self.access.port

    def login_url(self) -> str:
        return self.access.login_url()

    async def start(self, port: int = 0) -> None:
        """Listen on ``127.0.0.1:port`` (0: a free port, the usual case)."""
        shared_owners()  # the peer check's netlink socket, before any connection
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        self.access.port = sock.getsockname()[1]
        self._page = _static("index.html").replace(
            CSRF_PLACEHOLDER.encode(), self.access.csrf.encode()
        )
        self._server = await asyncio.start_server(self._handle, sock=sock, limit=MAX_BODY_BYTES)
        log.info("ui.listening", port=self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._handlers.close()
        await self._feed.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if not is_owners_connection(writer.transport, self.port):
                return
            if len(self._handlers) >= MAX_CONNECTIONS and not self._make_room():
                return
            with self._handlers.current():
                await self._serve(reader, writer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError) as exc:
            log.debug("ui.connection_closed", error=type(exc).__name__)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def _make_room(self) -> bool:
        """Close the oldest connection still sending its request (its handler then
        reads the end of it and ends); False if none is."""
        for oldest in self._reading:
            del self._reading[oldest]
            oldest.transport.abort()
            log.debug("ui.connection_evicted")
            return True
        return False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reading[writer] = None
        try:
            async with asyncio.timeout(HEAD_TIMEOUT):
                head, body = await _read_request(reader)
        except HttpError as exc:
            if not writer.is_closing():  # not closed to make room
                writer.write(_refusal(exc.status, str(exc)))
                await writer.drain()
            return
        finally:
            self._reading.pop(writer, None)
        verdict = self.access.decide(head.method, head.target, head.headers)
        if isinstance(verdict, Refuse):
            writer.write(_refusal(verdict.status, verdict.reason))
        elif isinstance(verdict, Login):
            extra = (("Location", verdict.location), ("Set-Cookie", verdict.cookie))
            writer.write(response(303, b"", "text/plain", extra))
        elif verdict.path == "/events" and verdict.method == b"GET":
            await self._events(writer)
            return
        else:
            writer.write(await self._route(verdict, body))
        await writer.drain()

    async def _route(self, verdict: Serve, body: bytes) -> bytes:
        if verdict.method == b"POST":
            if verdict.path != "/api/action":
                return _refusal(404, f"no action at {verdict.path[:100]!r}")
            return await self._act(body)
        if verdict.path == "/":
            return response(200, self._page, "text/html; charset=utf-8")
        if verdict.path == "/api/state":
            return _json(200, await self._snapshot())
        if verdict.path in STATIC:
            name, content_type = STATIC[verdict.path]
            return response(200, _static(name), content_type)
        return _refusal(404, f"nothing at {verdict.path[:100]!r}")

    async def _act(self, body: bytes) -> bytes:
        try:
            message = decode_json(body, max_bytes=MAX_BODY_BYTES)
        except JsonRefused as exc:  # nesting, NaN, bad UTF-8 too: refused, never a traceback
            return _json(400, {"ok": False, "error": f"the action is refused: {exc}"})
        if not isinstance(message, dict):
            return _json(400, {"ok": False, "error": "the action is not a JSON object"})
        try:
            answer = await asyncio.to_thread(self._action, message)
        except ControlError as exc:
            return _json(409, {"ok": False, "code": exc.code, "error": str(exc)})
        except SandbridgeError as exc:
            return _json(400, {"ok": False, "error": str(exc)})
        log.info("ui.action", action=str(message.get("action"))[:40])
        return _json(200, {"ok": True, **answer})

    async def _events(self, writer: asyncio.StreamWriter) -> None:
        """The tables as Server-Sent Events, each version once, until the page goes away."""
        if self._streams >= MAX_STREAMS:
            writer.write(_refusal(503, f"{MAX_STREAMS} dashboard tabs are open already"))
            await writer.drain()
            return
        self._streams += 1
        if not self._feeding:
            self._feeding = True
            self._feed.spawn(self._read_tables())
        try:
            writer.write(response_head(200, "text/event-stream; charset=utf-8", None))
            # First, proof that this is the page's own dashboard (its CSRF token, which
            # only a page of this dashboard holds): a tab that reconnects to a listener
            # that took the port of a dashboard that ended shows nothing from it.
            writer.write(b"event: hello\ndata: " + self.access.csrf.encode() + b"\n\n")
            seen = 0
            while not writer.is_closing():
                published = self._published
                if self._version != seen:
                    writer.write(b"data: " + self._tables + b"\n\n")
                    seen = self._version
                await writer.drain()
                try:
                    async with asyncio.timeout(KEEPALIVE_INTERVAL):
                        await published.wait()
                except TimeoutError:
                    writer.write(b": keep-alive\n\n")
        finally:
            self._streams -= 1

    async def _read_tables(self) -> None:
        """The feed: read the tables when told of a change or every ``refresh`` seconds,
        and publish them when they differ; stops when the last stream has gone."""
        loop = asyncio.get_running_loop()
        try:
            async with RegistryWatch((SESSIONS, REMOTES)) as watch, running(self._watch(watch)):
                await self._feed_tables(loop)
        finally:
            self._feeding = False  # in the step that saw no stream: the next one starts anew

    async def _watch(self, watch: RegistryWatch) -> None:
        while True:
            await watch.changed()
            self.notify()

    async def _feed_tables(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read the tables, publish them if they differ, wait for a change; repeat while
        a stream is open."""
        while self._streams:
            started = loop.time()
            self._changed.clear()  # a change told during the read is read next round
            try:
                data = json.dumps(await self._snapshot()).encode()
            except Exception as exc:  # a failed read: the last tables stay, and it is retried
                log.warning("ui.tables_unreadable", error=repr(exc)[:200])
                data = self._tables
            if data != self._tables:
                self._tables, self._version = data, self._version + 1
                published, self._published = self._published, asyncio.Event()
                published.set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._refresh):
                    await self._changed.wait()
            # A rate limit, not a wait for something: see MIN_READ_GAP.
            await asyncio.sleep(max(0.0, started + MIN_READ_GAP - loop.time()))


async def _read_request(reader: asyncio.StreamReader) -> tuple[RequestHead, bytes]:
    """One request's head and body (at most :data:`MAX_BODY_BYTES`)."""
    parser = RequestReader()
    head: RequestHead | None = None
    body = bytearray()
    while True:
        data = await reader.read(65536)
        if not data:
            raise HttpError(400, "the request ended early")
        for event in parser.feed(data):
            if isinstance(event, RequestHead):
                head = event
                if head.upgrade:
                    raise HttpError(400, "upgrades are not served")
                lengths = field_values(head.headers, b"content-length")
                if lengths and lengths[0].isdigit() and int(lengths[0]) > MAX_BODY_BYTES:
                    raise HttpError(413, f"the body is over {MAX_BODY_BYTES} bytes")
            elif isinstance(event, BodyChunk):
                body += event.data
                if len(body) > MAX_BODY_BYTES:
                    raise HttpError(413, f"the body is over {MAX_BODY_BYTES} bytes")
            elif event is MESSAGE_END and head is not None:
                return head, bytes(body)


def build_dashboard(
    snapshot: Snapshot = _polled_snapshot, refresh: float = REFRESH_INTERVAL
) -> Dashboard:
    """The dashboard over this user's running sessions, ready to :meth:`~Dashboard.start`
    (``snapshot``: how the host reads the tables; by default every session is asked over
    its control socket)."""
    return Dashboard(snapshot, refresh=refresh)
