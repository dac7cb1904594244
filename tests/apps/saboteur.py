"""What a hostile sandbox does to the runtime dir and the registration socket.

Usage (inside a sandbox): saboteur.py ACTION [ARG]. Prints ``READY <json>`` when done,
then waits until the file ``release`` appears in the working directory (a FIFO read).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

RUNTIME = Path("/run/ags-webview-relay")
UPSTREAM = RUNTIME / "upstream.sock"


class Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        return


def serve_app(port: int) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", port), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def register(port: int, base: str = "/") -> dict[str, object]:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(str(RUNTIME / "relay.sock"))
        sock.sendall(
            json.dumps({"type": "register", "port": port, "base_path": base}).encode() + b"\n"
        )
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    answer: dict[str, object] = json.loads(data)
    return answer


def raw_register(payload: bytes) -> dict[str, object]:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(str(RUNTIME / "relay.sock"))
        with contextlib.suppress(OSError):
            sock.sendall(payload)
        data = b""
        try:
            while chunk := sock.recv(4096):
                data += chunk
        except OSError:
            pass
    answer: dict[str, object] = json.loads(data)
    return answer


def main() -> None:
    action = sys.argv[1]
    report: dict[str, object] = {}
    serve_app(4173)
    good = register(4173)
    report["good_url"] = good["url"]
    serve_app(4174)
    report["victim_url"] = register(4174)["url"]
    if action == "symlink":
        UPSTREAM.unlink()
        UPSTREAM.symlink_to(sys.argv[2])
    elif action == "file":
        UPSTREAM.unlink()
        UPSTREAM.write_text("not a socket")
    elif action == "fifo":
        UPSTREAM.unlink()
        os.mkfifo(UPSTREAM)
    elif action == "link-out":
        (RUNTIME / "escape").symlink_to(sys.argv[2])
        (RUNTIME / "subdir").mkdir()
        (RUNTIME / "subdir" / "escape").symlink_to(sys.argv[2])
    elif action == "hostile-shim":
        shim = subprocess.Popen(
            [sys.executable, sys.argv[2], str(UPSTREAM), "stream", "--replace"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert shim.stdout is not None
        assert shim.stdout.readline().startswith(b"HOSTILE READY")
    elif action == "hostile-app":  # the hostile shim's answers from an app of its own
        app = subprocess.Popen(
            [sys.executable, sys.argv[2], "4175", "tcp"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert app.stdout is not None
        assert app.stdout.readline().startswith(b"HOSTILE READY")
        report["victim_url"] = register(4175)["url"]
    elif action == "abuse":
        report["huge"] = raw_register(b'{"type":"register","port":1,"x":"' + b"a" * 1_000_000)
        report["malformed"] = raw_register(b"\x00\xff{]\n")
        silent = []
        for _ in range(200):  # connections that never send
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(str(RUNTIME / "relay.sock"))
            silent.append(sock)
        report["silent_connections"] = len(silent)
        answers = [register(5000 + i) for i in range(70)]  # while the silent ones wait
        # Each silent connection is answered: dropped to make room, or timed out.
        errors = [json.loads(sock.recv(4096))["error"] for sock in silent]
        report["dropped"] = sum(1 for e in errors if e.startswith("dropped"))
        report["timed_out"] = sum(1 for e in errors if e.startswith("no complete request"))
        for sock in silent:
            sock.close()
        report["accepted"] = sum(1 for a in answers if a.get("ok") is True)
        report["refusal"] = next(a["error"] for a in answers if a.get("ok") is False)
    print("READY " + json.dumps(report), flush=True)
    with open("release") as fifo:
        fifo.read()


if __name__ == "__main__":
    main()
