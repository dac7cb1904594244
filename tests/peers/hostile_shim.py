"""A hostile shim: what a compromised sandbox could put on ``upstream.sock``.

Usage: hostile_shim.py SOCKET_PATH stream|v1 [--replace], or hostile_shim.py PORT tcp
It answers stream openings (or, in v1 mode, refuses them like a v1-only shim and then
answers v1 requests) with the broken response that the request's path names:
``/hostile/<behaviour>``. Any other path gets a well-formed 200. In tcp mode it is an app
on ``127.0.0.1:PORT`` that answers the same way: what the host meets where it connects to
the app itself (relay/host/owned_upstream.py) and never asks the shim.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import sys
import threading

FLOOD = b"X-Flood: " + b"a" * 65536 + b"\r\n"


def http_answer(behaviour: str, conn: socket.socket) -> None:
    if behaviour == "garbage":
        conn.sendall(b"NOT HTTP AT ALL\r\n\r\n")
    elif behaviour == "unending-headers":
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        for _ in range(64):  # 4 MiB of header, never ending
            conn.sendall(FLOOD)
        threading.Event().wait(30)
    elif behaviour == "crlf-in-header":
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-A: a\rSet-Cookie: b\r\nContent-Length: 0\r\n\r\n")
    elif behaviour == "bad-status":
        conn.sendall(b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n")
    elif behaviour == "short-body":
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
    elif behaviour == "long-body":
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello and much more")
    elif behaviour == "stall":
        threading.Event().wait(60)
    elif behaviour == "slow-pieces":
        # Pieces 0.4 s apart, 1.6 s in all: each within the response timeout (1 s) of
        # the one before, the whole body not.
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in (b"one ", b"two ", b"three ", b"four"):
            threading.Event().wait(0.4)  # (the app's pacing, which the test is about)
            conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        conn.sendall(b"0\r\n\r\n")
    elif behaviour == "stall-mid-body":
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n01234")
        threading.Event().wait(60)
    else:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


def v1_answer(behaviour: str) -> bytes:
    if behaviour == "garbage":
        return b"{not json\n"
    if behaviour == "bad-status":
        return (
            json.dumps({"ok": True, "status": 2000, "reason": "OK", "headers": []}).encode() + b"\n"
        )
    if behaviour == "crlf-in-header":
        return (
            json.dumps(
                {
                    "ok": True,
                    "status": 200,
                    "reason": "OK",
                    "headers": [["x-a", "a\r\nSet-Cookie: b"]],
                }
            ).encode()
            + b"\n"
        )
    if behaviour == "unending-headers":
        return b'{"ok":true,"status":200,"headers":[["x","' + b"a" * (32 << 20)
    if behaviour == "stall":
        threading.Event().wait(60)
        return b""
    body = base64.b64encode(b"ok").decode()
    return (
        json.dumps(
            {"ok": True, "status": 200, "reason": "OK", "headers": [], "body_base64": body}
        ).encode()
        + b"\n"
    )


def read_until(conn: socket.socket, marker: bytes) -> bytes:
    data = b""
    while marker not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def serve_http(conn: socket.socket) -> None:
    """Answer each request head on ``conn`` as its path says, until a hostile one."""
    while True:
        head = read_until(conn, b"\r\n\r\n")
        if not head:
            return
        path = head.split(b" ")[1].decode()
        http_answer(path.removeprefix("/hostile/"), conn)
        if path.startswith("/hostile/"):
            return


def serve_app(conn: socket.socket) -> None:
    with conn, contextlib.suppress(OSError):
        serve_http(conn)


def serve(conn: socket.socket, mode: str) -> None:
    with conn:
        try:
            first = json.loads(read_until(conn, b"\n").split(b"\n")[0])
            if first.get("type") == "http_stream":
                if mode == "v1":
                    conn.sendall(b'{"ok":false,"error":"unsupported"}\n')
                    return
                conn.sendall(b'{"ok":true,"stream":1}\n')
                serve_http(conn)
            else:
                conn.sendall(v1_answer(str(first.get("path", "")).removeprefix("/hostile/")))
        except OSError:
            return


def main() -> None:
    path, mode = sys.argv[1], sys.argv[2]
    if mode == "tcp":
        app = socket.create_server(("127.0.0.1", int(path)))
        print("HOSTILE READY", flush=True)
        while True:
            conn, _ = app.accept()
            threading.Thread(target=serve_app, args=(conn,), daemon=True).start()
    if "--replace" in sys.argv and os.path.lexists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    os.chmod(path, 0o600)
    server.listen(64)
    print("hostile shim listening", file=sys.stderr, flush=True)
    print("HOSTILE READY", flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve, args=(conn, mode), daemon=True).start()


if __name__ == "__main__":
    main()
