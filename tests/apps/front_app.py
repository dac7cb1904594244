"""An app whose every response is exact bytes, for the relay's front door tests.

Runs inside a sandbox; registers its port twice (base ``/`` and base ``/app``) and prints
``READY <json>`` with both URLs. Every path answers with bytes written here by hand, so
that a test chooses which rule of the relay a response meets: a whole response with one
Content-Length (the front's), 204 and 304, cookies and policies, a Location, chunked and
close-delimited bodies, 1 MiB, a stream, a WebSocket upgrade, a slow answer (``/slow``,
past the front's grace) and a paused one (``/pause``, within it), bytes after a response,
a duplicate Content-Length. ``/app`` is taken off a path before routing.

``/stats`` answers what the app saw: the connections it accepted, how many requests
carried each ``id=`` query value, and the ``/late`` targets whose extra bytes went out.
``/drop-idle`` closes every connection that is between two requests, and its own after
its answer (an app whose keep-alive ran out); ``/bye`` only its own, its end in the segment
of its answer. ``/late`` answers, then sends a second response nobody asked for on the
connection. With a port as argument, it listens there
too (auto-publish publishes it) until ``/stop-extra``. ``/vanish`` closes the connection
of the first request of an ``id=`` unanswered. ``/sse`` sends one event, then the second
once ``/release`` is asked for.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import socket
import sys
import threading
import time
import urllib.parse
from pathlib import Path

RUNTIME = Path("/run/ags-webview-relay")
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC11B11"
BIG = bytes(range(256)) * 4096  # 1 MiB of a known pattern
SIZED = 60000
LATE_SECONDS = 0.1  # /late's extra bytes come after the relay has relayed its response
SLOW_SECONDS = 0.6  # longer than the front's grace (0.25 s): the Python relay takes over
PAUSE_SECONDS = 0.15  # shorter than the front's grace: the front waits for the answer

lock = threading.Lock()
accepts = 0
seen: dict[str, int] = {}
idle: set[socket.socket] = set()
released = threading.Event()
extra: list[socket.socket] = []  # the listener of the port given as argument
late: list[str] = []  # the targets of /late requests whose extra bytes went out


def register(port: int, base: str) -> str:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(str(RUNTIME / "relay.sock"))
        sock.sendall(json.dumps({"type": "register", "port": port, "base_path": base}).encode())
        sock.sendall(b"\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    return str(json.loads(data)["url"])


def whole(status: str, fields: list[tuple[str, str]], body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in fields)
    return head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class Connection:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def read_request(self) -> tuple[bytes, bytes] | None:
        """(head, body) of the next request, or None at the end."""
        while b"\r\n\r\n" not in self.buffer:
            with lock:
                idle.add(self.sock)
            try:
                data = self.sock.recv(65536)
            except OSError:
                data = b""
            with lock:
                idle.discard(self.sock)
            if not data:
                return None
            self.buffer += data
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        head += b"\r\n\r\n"
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(self.buffer) < length:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buffer += data
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return head, body

    def serve(self) -> None:
        try:
            while (request := self.read_request()) is not None:
                if not self.answer(*request):
                    break
        except OSError:
            pass
        finally:
            self.sock.close()

    def answer(self, head: bytes, body: bytes) -> bool:
        """Answer one request; False: the connection ends."""
        method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
        parts = urllib.parse.urlsplit(target)
        path = parts.path.removeprefix("/app") or "/"
        for value in urllib.parse.parse_qs(parts.query).get("id", []):
            with lock:
                seen[value] = seen.get(value, 0) + 1
        send = self.sock.sendall if method != "HEAD" else self.send_head
        if path == "/plain":
            send(whole("200 OK", [("Content-Type", "text/plain"), ("X-Path", target)], b"hello"))
        elif path == "/head":  # the request head as the app received it
            send(whole("200 OK", [("Content-Type", "text/plain")], head))
        elif path == "/nocontent":
            send(b"HTTP/1.1 204 No Content\r\nX-Kind: none\r\n\r\n")
        elif path == "/notmod":
            send(b'HTTP/1.1 304 Not Modified\r\nETag: "v1"\r\nContent-Length: 5\r\n\r\n')
        elif path == "/cookie":
            fields = [("Set-Cookie", "sandbridge_x=stolen; Path=/"), ("Set-Cookie", "own=1")]
            send(whole("200 OK", fields, b"cookies"))
        elif path == "/referrer":
            send(whole("200 OK", [("Referrer-Policy", "no-referrer")], b"ref"))
        elif path == "/redirect":
            send(whole("302 Found", [("Location", "/plain")], b""))
        elif path == "/chunked":
            send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            send(chunk(b"hello ") + chunk(b"chunks") + b"0\r\n\r\n")
        elif path == "/close":
            send(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nclose-delimited body")
            return False
        elif path == "/sized":  # the most the front relays whole (its PEEK_MAX is 64 KiB)
            send(whole("200 OK", [], BIG[:SIZED]))
        elif path == "/big":
            send(whole("200 OK", [("Content-Type", "application/octet-stream")], BIG))
        elif path == "/sse":
            released.clear()
            stream = "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            send(f"HTTP/1.1 200 OK\r\n{stream}Transfer-Encoding: chunked\r\n\r\n".encode())
            send(chunk(b"data: one\n\n"))
            released.wait(30)
            send(chunk(b"data: two\n\n") + b"0\r\n\r\n")
        elif path == "/release":
            released.set()
            send(whole("200 OK", [], b"released"))
        elif path == "/ws":
            return self.websocket(head)
        elif path == "/echo" and method == "POST":
            send(whole("200 OK", [("Content-Type", "application/octet-stream")], body))
        elif path == "/slow":
            time.sleep(SLOW_SECONDS)  # the app's behaviour under test, not a wait
            send(whole("200 OK", [], b"slow"))
        elif path == "/pause":
            time.sleep(PAUSE_SECONDS)  # the app's behaviour under test, not a wait
            send(whole("200 OK", [], b"paused"))
        elif path == "/trailing":
            send(whole("200 OK", [], b"ok") + b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil")
        elif path == "/late":  # a whole response, then more once the relay took it
            send(whole("200 OK", [], b"ok"))
            time.sleep(LATE_SECONDS)
            send(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil")
            with lock:
                late.append(target)
        elif path == "/duplen":
            send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok")
        elif path == "/drop-idle":
            with lock:
                others = [sock for sock in idle if sock is not self.sock]
            for sock in others:
                sock.shutdown(socket.SHUT_RDWR)
            send(whole("200 OK", [], str(len(others)).encode()))
            return False  # and this one too: an app whose keep-alive is 0
        elif path == "/bye":  # its answer and its end in one segment (corked until the end)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            send(whole("200 OK", [], b"bye"))
            self.sock.shutdown(socket.SHUT_WR)
            return False
        elif path == "/vanish":  # the first request of an id: closed, unanswered
            with lock:
                first = seen.get(parts.query.removeprefix("id="), 0) == 1
            if first:
                return False
            send(whole("200 OK", [], b"back"))
        elif path == "/stop-extra":
            extra[0].shutdown(socket.SHUT_RDWR)
            extra[0].close()
            send(whole("200 OK", [], b"stopped"))
        elif path == "/stats":
            with lock:
                stats = {"accepts": accepts, "seen": dict(seen), "idle": len(idle), "late": late}
            send(
                whole("200 OK", [("Content-Type", "application/json")], json.dumps(stats).encode())
            )
        else:
            send(whole("404 Not Found", [], b"no such path: " + target.encode("latin-1")))
        return True

    def send_head(self, response: bytes) -> None:
        """A response to HEAD: its head only."""
        self.sock.sendall(response.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n")

    def websocket(self, head: bytes) -> bool:
        key = b""
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"sec-websocket-key":
                key = value.strip()
        accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
        self.sock.sendall(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        data = self.buffer
        while True:  # bytes both ways untouched: echoed as they come
            if data:
                self.sock.sendall(data)
            data = self.sock.recv(65536)
            if not data:
                return False


def serve(server: socket.socket) -> None:
    global accepts
    with contextlib.suppress(OSError):  # (the extra listener's shutdown ends it)
        while True:
            sock, _ = server.accept()
            with lock:
                accepts += 1
            threading.Thread(target=Connection(sock).serve, daemon=True).start()


def main() -> None:
    server = socket.create_server(("127.0.0.1", 0), backlog=1024)
    port = server.getsockname()[1]
    if len(sys.argv) > 1:  # a port auto-publish publishes, until /stop-extra
        extra.append(socket.create_server(("127.0.0.1", int(sys.argv[1])), backlog=1024))
        threading.Thread(target=serve, args=(extra[0],), daemon=True).start()
    urls = {"root": register(port, "/"), "base": register(port, "/app"), "port": port}
    print("READY " + json.dumps(urls), flush=True)
    serve(server)


if __name__ == "__main__":
    main()
