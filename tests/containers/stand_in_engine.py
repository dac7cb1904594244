"""A stand-in for the owner's container engine: a real Unix socket answering the few calls
the bridge's tests make as the Docker API answers them, and recording every request that
reached it (``requests``), so a test can say that a refused one never did.

It parses requests with the project's own HTTP reader and answers with fixed shapes: a
create gives a new 64-hex id, an attach or exec start is handed over (``101``) and then
echoes what it is sent in upper case until its input ends, a followed log arrives in two
chunks, anything it does not know is a 404 as the engine's. It runs on the event loop of
:class:`BridgeThread`, beside the bridge under test.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from sandbridge.protocol.http.parser import (
    MESSAGE_END,
    BodyChunk,
    RequestHead,
    RequestReader,
    Upgraded,
)
from tests.support.loop_thread import LoopThread


@dataclass(frozen=True)
class Seen:
    """A request that reached the stand-in."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        return re.sub(r"^/v[0-9.]+", "", self.target.partition("?")[0])

    def json(self) -> object:
        return json.loads(self.body)


INFO = {
    "ServerVersion": "28.2.2", "OSType": "linux", "Architecture": "x86_64", "NCPU": 2,
    "DockerRootDir": "/var/lib/docker", "Containers": 7, "Name": "owners-laptop",
    "HttpProxy": "http://proxy.internal:3128", "RegistryConfig": {"Mirrors": ["m"]},
}  # fmt: skip


class StandInEngine:
    """Serves ``socket`` (a path) on the running loop; :attr:`requests` is what reached it."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.requests: list[Seen] = []
        self._server: asyncio.Server | None = None
        # Set when the bridge let go of a followed log (its connection to here closed).
        self.follow_closed = threading.Event()
        self._reader_of: dict[asyncio.StreamWriter, asyncio.StreamReader] = {}
        self.volumes: dict[str, dict[str, str]] = {}

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, str(self.socket))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def paths(self) -> list[str]:
        return [f"{seen.method} {seen.path}" for seen in self.requests]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader_of[writer] = reader
        requests = RequestReader()
        head: RequestHead | None = None
        body = bytearray()
        try:
            while data := await reader.read(65536):
                for event in requests.feed(data):
                    if isinstance(event, RequestHead):
                        head, body = event, bytearray()
                    elif isinstance(event, BodyChunk):
                        body += event.data
                    elif isinstance(event, Upgraded):
                        assert head is not None
                        await self._hijack(head, bytes(body) + event.trailing, reader, writer)
                        return
                    elif event is MESSAGE_END and head is not None and not head.upgrade:
                        await self._answer(self._seen(head, bytes(body)), writer)
        finally:
            self._reader_of.pop(writer, None)
            writer.close()

    def _seen(self, head: RequestHead, body: bytes) -> Seen:
        headers = {n.decode().lower(): v.decode() for n, v in head.headers}
        seen = Seen(head.method.decode(), head.target.decode(), headers, body)
        self.requests.append(seen)
        return seen

    async def _hijack(
        self,
        head: RequestHead,
        data: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        size = int(dict((n.lower(), v) for n, v in head.headers).get(b"content-length", b"0"))
        self._seen(head, data[:size])
        writer.write(
            b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
            b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
        )
        writer.write(data[size:].upper())
        while more := await reader.read(65536):
            writer.write(more.upper())
            await writer.drain()
        writer.write(b"[stdin closed]")
        await writer.drain()

    async def _answer(self, seen: Seen, writer: asyncio.StreamWriter) -> None:
        method, path = seen.method, seen.path
        answer: object
        status, answer = 404, {"message": f"no such endpoint {path}"}
        if path == "/_ping":
            writer.write(b"HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nContent-Length: 2\r\n\r\n")
            writer.write(b"" if method == "HEAD" else b"OK")
            return
        if path == "/info":
            status, answer = 200, INFO
        elif path == "/version":
            status, answer = 200, {"Version": "28.2.2", "ApiVersion": "1.41"}
        elif method == "POST" and path in ("/containers/create", "/networks/create"):
            status, answer = 201, {"Id": secrets.token_hex(32), "Warnings": []}
        elif method == "POST" and path == "/volumes/create":
            asked = json.loads(seen.body)
            name = asked.get("Name") or secrets.token_hex(32)
            # As Docker's: a name that exists answers with that volume, its labels kept.
            labels = self.volumes.setdefault(name, asked.get("Labels") or {})
            status, answer = 201, {"Name": name, "Driver": "local", "Labels": labels}
        elif method == "POST" and re.fullmatch(r"/containers/[0-9a-f]{64}/exec", path):
            status, answer = 201, {"Id": secrets.token_hex(32)}
        elif re.fullmatch(r"/containers/[0-9a-f]{64}/(start|stop|kill)", path) or (
            method == "DELETE" and re.fullmatch(r"/(containers|networks|volumes)/[^/]+", path)
        ):
            status, answer = 204, None
        elif path in ("/containers/json", "/images/json", "/networks", "/volumes"):
            status, answer = 200, []
        elif re.fullmatch(r"/containers/[0-9a-f]{64}/(json|wait)", path):
            status, answer = 200, {"StatusCode": 0}
        elif re.fullmatch(r"/containers/[0-9a-f]{64}/logs", path) and "follow=1" in seen.target:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\ntick\n\r\n")
            await writer.drain()
            await self._reader_of[writer].read()  # a log that never ends, until let go
            self.follow_closed.set()
            return
        elif re.fullmatch(r"/containers/[0-9a-f]{64}/logs", path):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
            for piece in (b"first line\n", b"second line\n"):
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            return
        body = b"" if answer is None else json.dumps(answer).encode()
        writer.write(
            b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nX-Engine-Secret: yes\r\n"
            b"Content-Length: %d\r\n\r\n" % (status, len(body)) + body
        )
        await writer.drain()


class EngineThread(LoopThread):
    """A stand-in engine at ``socket`` on an event loop in a thread of its own, for a
    session a test starts as a separate process (``sandbridge run``, ``host``)."""

    def __init__(self, socket: Path) -> None:
        self.engine = StandInEngine(socket)
        self.socket = socket
        super().__init__()

    @property
    def requests(self) -> list[Seen]:
        return self.engine.requests

    async def start_servers(self) -> None:
        await self.engine.start()

    async def close_servers(self) -> None:
        await self.engine.close()
