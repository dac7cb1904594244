"""An HTML snapshot on a dedicated host origin (``sandbridge-open --html FILE``).

The sandbox sends a page's bytes once; the host serves that copy, and nothing else, on a
fresh loopback listener under a name of its own (``<label>.localhost``, as an app gets),
so the page shares no cookies or storage with any app or other localhost service. It
is answered with ``Content-Security-Policy: sandbox allow-scripts``: its scripts run in
an opaque origin, unable to read even the snapshot's own origin's storage. Only ``GET``
and ``HEAD`` of any path are answered, each on a connection of its own, and only to the
owner: like an app's listener, it closes another local user's connection at accept
(:mod:`sandbridge.relay.host.local_peer`), so nobody else reads the page (in the IP form
``127.0.0.1:<port>`` it has no name to guess) or holds connections open against it.
The owner's own connections are bounded too (:data:`MAX_CONNECTIONS`, and each has
:data:`HEAD_TIMEOUT` for its head and :data:`SEND_TIMEOUT` to take its answer).
"""

from __future__ import annotations

import asyncio

from sandbridge.aio.tasks import TaskSet
from sandbridge.exceptions import HttpError
from sandbridge.protocol.http.origin_policy import AppOrigin, UrlForm, check_host
from sandbridge.protocol.http.parser import RequestHead, RequestReader
from sandbridge.relay.host import local_peer

# A browser sends its request head at once; a connection silent for this long is closed.
HEAD_TIMEOUT = 15.0
# A browser on this machine takes even the largest page in milliseconds: a connection
# that has not taken its answer within this long is not reading, and is dropped. Where
# the kernel's send buffer is smaller than the page, such a connection would otherwise
# keep the page's copy in the write buffer, and its task, until the session ends (with
# Linux's default tcp_wmem the kernel takes a whole 2 MiB page, and it never does).
SEND_TIMEOUT = 15.0
# Open connections one snapshot serves at once: a page that inlines what it needs costs
# a browser one or two; past this many (the owner's uid flooding it: a --network full
# sandbox) a connection is closed at once, so the host's descriptors and memory stay
# bounded (16 snapshots x 64 per session).
MAX_CONNECTIONS = 64
_READ_SIZE = 65536


def _response(status: int, reason: str, body: bytes, content_type: bytes, head: bool) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {reason}".encode(),
        b"Content-Type: " + content_type,
        f"Content-Length: {len(body)}".encode(),
        b"Content-Security-Policy: sandbox allow-scripts",
        b"X-Content-Type-Options: nosniff",
        b"Cache-Control: no-store",
        b"Connection: close",
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + (b"" if head else body)


class Snapshot:
    """Serves one immutable HTML body on ``127.0.0.1:<host_port>`` under its own name."""

    def __init__(self, body: bytes, url_form: UrlForm = UrlForm.NAME) -> None:
        self.body = body
        self.url_form = url_form
        self.origin: AppOrigin | None = None
        self._server: asyncio.Server | None = None
        self._tasks = TaskSet()
        self._connections = 0

    @property
    def url(self) -> str:
        assert self.origin is not None
        return self.origin.url("/")

    async def start(self) -> None:
        local_peer.shared_owners()  # its netlink socket, before any connection
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.origin = AppOrigin.new(port, self.url_form)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        port = writer.get_extra_info("sockname")[1]
        if local_peer.owners_peer(writer.transport, port) is None:
            writer.transport.abort()  # another user's: no answer, no task held open
            return
        if self._connections >= MAX_CONNECTIONS:
            writer.transport.abort()
            return
        self._connections += 1
        with self._tasks.current():
            try:
                await self._exchange(reader, writer)
            except (OSError, TimeoutError):
                writer.transport.abort()  # silent, not reading, or gone: nothing to flush
            finally:
                writer.close()
                try:
                    async with asyncio.timeout(SEND_TIMEOUT):
                        await writer.wait_closed()
                except (OSError, TimeoutError):
                    writer.transport.abort()
                self._connections -= 1  # last: it counts until its buffer is gone

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HEAD_TIMEOUT):
                head = await _read_head(reader)
            answer = self._answer(head)
        except HttpError as exc:
            answer = _response(exc.status, "Refused", str(exc).encode(), b"text/plain", False)
        writer.write(answer)
        async with asyncio.timeout(SEND_TIMEOUT):
            await writer.drain()

    def _answer(self, head: RequestHead) -> bytes:
        assert self.origin is not None
        check_host(head.headers, self.origin)
        if head.method not in (b"GET", b"HEAD"):
            raise HttpError(405, "a snapshot answers GET and HEAD only")
        return _response(200, "OK", self.body, b"text/html; charset=utf-8", head.method == b"HEAD")

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._tasks.close()
        if self._server is not None:
            await self._server.wait_closed()


async def _read_head(reader: asyncio.StreamReader) -> RequestHead:
    parser = RequestReader()
    while True:
        data = await reader.read(_READ_SIZE)
        if not data:
            raise HttpError(400, "the connection closed before a request head")
        for event in parser.feed(data):
            if isinstance(event, RequestHead):
                return event
