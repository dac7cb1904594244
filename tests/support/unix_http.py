"""HTTP over Unix sockets for the tests: a client connection, one-request calls, and a
threaded server for a handler class (the recorder's proxy, the replay stand-in)."""

from __future__ import annotations

import http.client
import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

# An engine's answer to a test's request (create, start, delete of a busybox container)
# comes well within a second; a machine running the whole suite may take many times that.
TIMEOUT = 60.0


class UnixHTTPConnection(http.client.HTTPConnection):
    """:class:`http.client.HTTPConnection` over a Unix socket (the engine's API)."""

    def __init__(self, path: Path, timeout: float = TIMEOUT) -> None:
        super().__init__("engine", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.path))


@dataclass(frozen=True)
class Answer:
    """One API response, read whole (the tests' exchanges are small)."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON (``Any``: the tests index it as they assert on it)."""
        return json.loads(self.body)


def api_request(path: Path, method: str, target: str, body: object = None) -> Answer:
    """One request on a new connection to the API at ``path``; ``body``, if not None, is
    sent as JSON."""
    connection = UnixHTTPConnection(path)
    try:
        headers = {} if body is None else {"Content-Type": "application/json"}
        data = None if body is None else json.dumps(body).encode()
        connection.request(method, target, body=data, headers=headers)
        response = connection.getresponse()
        return Answer(response.status, dict(response.getheaders()), response.read())
    finally:
        connection.close()


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


# How often the serving loop looks for shutdown(): socketserver's own half second was half
# a second of every test's teardown that served an engine (68 of them in one file).
SHUTDOWN_POLL_SECONDS = 0.02


@contextmanager
def serving(path: Path, handler: type[BaseHTTPRequestHandler]) -> Iterator[None]:
    """Serve ``handler`` on a Unix socket at ``path`` for the block, one thread per
    connection; every thread is done when the block ends."""
    server = _UnixServer(str(path), handler)
    thread = threading.Thread(
        target=server.serve_forever, args=(SHUTDOWN_POLL_SECONDS,), name=f"serving {path.name}"
    )
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
