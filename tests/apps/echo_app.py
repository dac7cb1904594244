"""Test app: an HTTP server that reports what it received, run inside or outside a sandbox.

Usage: echo_app.py [--register PORT[:BASE]]... [--listen PORT]... [--bind ADDRESS]
[--v6only] [--at PORT@ADDRESS[/v6only]]... [--daemon]
Listens on ADDRESS (127.0.0.1 unless told: ::1, 0.0.0.0, ::; ``--v6only`` makes ``::``
IPv6 only); each ``--at`` listens on a port at an address of its own (one process for
what would be several apps on different addresses). Prints ``READY <json>`` once every
port listens (and is registered with ``ags-webview-url`` when asked), then serves until
killed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body go out in two writes: with Nagle's algorithm the body would
    # wait for the ACK of the head, which the peer delays up to 40 ms on a kept-alive
    # connection. A real app server (gunicorn, uvicorn, node) sets TCP_NODELAY too.
    disable_nagle_algorithm = True

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b""):
                        pass
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _route(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        path = url.path
        if path.endswith("/styles.css"):
            self._reply(200, b"body { color: rgb(1, 2, 3); }", "text/css; charset=utf-8")
        elif path.endswith("/bytes"):
            size = int(query.get("n", ["0"])[0])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            block = bytes(range(256)) * 256
            while size > 0:
                self.wfile.write(block[: min(size, len(block))])
                size -= len(block)
        elif path.endswith("/chunked"):
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in query.get("part", ["a", "b", "c"]):
                data = part.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"0\r\n\r\n")
        elif path.endswith("/close-delimited"):
            self.close_connection = True
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close")
        elif path.endswith("/status"):
            self._reply(int(query.get("code", ["200"])[0]), b"")
        elif path.endswith("/set-cookie"):
            # A page that sets each ``c`` as a Set-Cookie and each ``csd`` as a
            # Clear-Site-Data (cookie tests: what a hostile app may answer).
            body = b"<!doctype html><title>cookies</title>set"
            self.send_response(200)
            for value in query.get("c", []):
                self.send_header("Set-Cookie", value)
            for value in query.get("csd", []):
                self.send_header("Clear-Site-Data", value)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif path.endswith("/pid"):
            self._reply(200, json.dumps({"pid": os.getpid()}).encode())
        else:
            body = self._body()
            report = {
                "method": self.command,
                "path": self.path,
                "headers": [[k, v] for k, v in self.headers.items()],
                "body_len": len(body),
                "body_sha256": hashlib.sha256(body).hexdigest(),
                "server_port": self.server.server_address[1],  # type: ignore[index]
            }
            self._reply(200, json.dumps(report).encode())

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _route

    def log_message(self, format: str, *args: object) -> None:
        return


def server(address: str, port: int, v6only: bool) -> ThreadingHTTPServer:
    """A server on ``address:port``; an IPv6 one dual stack unless ``v6only``."""
    ipv6 = ":" in address

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ipv6 else socket.AF_INET

        def server_bind(self) -> None:
            if ipv6:
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(v6only))
            super().server_bind()

    return Server((address, port), Handler)


def register(port: int, base: str) -> str:
    result = subprocess.run(
        ["ags-webview-url", str(port), base], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"registration failed: {result.stderr.strip()}")
    return result.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--register", action="append", default=[], metavar="PORT[:BASE]")
    parser.add_argument("--listen", action="append", type=int, default=[])
    parser.add_argument("--bind", default="127.0.0.1", metavar="ADDRESS")
    parser.add_argument("--v6only", action="store_true", help="an IPv6 --bind takes no IPv4")
    parser.add_argument("--at", action="append", default=[], metavar="PORT@ADDRESS[/v6only]")
    parser.add_argument("--daemon", metavar="MARKER", help="also start a setsid daemon")
    parser.add_argument("--exit", type=int, default=None, help="exit at once with this status")
    args = parser.parse_args()
    if args.exit is not None:
        return int(args.exit)
    report: dict[str, object] = {"urls": [], "pid": os.getpid()}
    ports = {int(spec.split(":")[0]) for spec in args.register} | set(args.listen)
    for port in sorted(ports):
        serving = server(args.bind, port, args.v6only)
        serving.daemon_threads = True
        threading.Thread(target=serving.serve_forever, daemon=True).start()
    for spec in args.at:
        port, _, where = spec.partition("@")
        address, _, flag = where.partition("/")
        serving = server(address, int(port), flag == "v6only")
        serving.daemon_threads = True
        threading.Thread(target=serving.serve_forever, daemon=True).start()
    for spec in args.register:
        port, _, base = spec.partition(":")
        report["urls"].append(register(int(port), base or "/"))  # type: ignore[attr-defined]
    if args.daemon:
        daemon = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(3600)", args.daemon],
            start_new_session=True,
        )
        report["daemon_pid"] = daemon.pid
    report["hostname"] = socket.gethostname()
    print("READY " + json.dumps(report), flush=True)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
