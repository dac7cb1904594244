"""A hostile stream shim that abuses the connection handoff.

Usage: handoff_shim.py SOCKET_PATH KIND
It serves a small app of its own on a loopback port (printed on stderr as
``handoff shim listening app=<port>``). Openings for that port get a correct handoff;
openings for any other port get the misbehaviour ``KIND``:

none        a handoff answer with no descriptor
two         a correct socket plus a pipe
many        ten descriptors in one message (more than the host makes room for)
pipe        a pipe instead of a socket
unix        a Unix socket instead of a TCP socket
udp         a UDP socket connected to the requested port
listening   a socket listening on the requested port
wrong-port  a TCP socket connected to the shim's own app instead
unoffered   a plain (non-handoff) answer with a socket attached
bytes-after a correct handoff followed by more bytes
lingering   a TCP socket to a peer that never reads, send queue full, SO_LINGER 600 s,
            connected to another port (refused); the shim closes its copy at once
lingering-adopted
            the same, connected to the requested port (adopted); the shim re-arms
            SO_LINGER through its copy for a while, then closes it, so that the host
            holds the last reference of a socket whose close would wait 600 s
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import threading
import time

HANDOFF_ACK = b'{"ok":true,"stream":1,"handoff":1}\n'
PLAIN_ACK = b'{"ok":true,"stream":1}\n'
# Sockets that must stay open while the host looks at what it was handed.
KEEP: list[object] = []


def serve_app(listener: socket.socket) -> None:
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=answer_requests, args=(conn,), daemon=True).start()


def answer_requests(conn: socket.socket) -> None:
    with conn:
        data = b""
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
            while b"\r\n\r\n" in data:
                _, data = data.split(b"\r\n\r\n", 1)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


LISTENERS: dict[int, socket.socket] = {}


def listen_on(port: int, rcvbuf: int = 0) -> socket.socket:
    if port in LISTENERS:
        return LISTENERS[port]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if rcvbuf:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    listener.bind(("127.0.0.1", port))
    listener.listen(16)
    LISTENERS[listener.getsockname()[1]] = listener
    return listener


def connected_to(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    KEEP.append(sock)
    return sock


LINGER_600 = struct.pack("ii", 1, 600)
# A small send buffer fills at once; the peer never reads nor accepts.
STUCK_BUFFER = 4096


def stuck_socket(port: int) -> socket.socket:
    """A socket to ``port`` (whose listener never accepts) with a full send queue and
    SO_LINGER 600 s: the last close of it waits up to 600 s."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STUCK_BUFFER)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    try:
        while True:
            sock.send(b"x" * 65536)
    except BlockingIOError:
        pass
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_600)
    return sock


def rearm_then_close(sock: socket.socket, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_600)
        time.sleep(0.01)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_600)
    sock.close()  # the host holds the last reference now
    print("handoff shim closed its copy", file=sys.stderr, flush=True)


def send(conn: socket.socket, line: bytes, fds: list[int]) -> None:
    socket.send_fds(conn, [line], fds) if fds else conn.sendall(line)


def misbehave(kind: str, conn: socket.socket, port: int, app_port: int) -> None:
    if kind == "none":
        send(conn, HANDOFF_ACK, [])
        return
    if kind == "wrong-port":
        send(conn, HANDOFF_ACK, [connected_to(app_port).fileno()])
        return
    if kind == "listening":
        send(conn, HANDOFF_ACK, [listen_on(port).fileno()])
        return
    if kind == "pipe":
        read_end, write_end = os.pipe()
        KEEP.append(write_end)
        send(conn, HANDOFF_ACK, [read_end])
        return
    if kind == "unix":
        ours, theirs = socket.socketpair()
        KEEP.extend((ours, theirs))
        send(conn, HANDOFF_ACK, [theirs.fileno()])
        return
    if kind == "udp":
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.connect(("127.0.0.1", port))
        KEEP.append(udp)
        send(conn, HANDOFF_ACK, [udp.fileno()])
        return
    if kind == "lingering":
        stuck = stuck_socket(SINK.getsockname()[1])
        send(conn, HANDOFF_ACK, [stuck.fileno()])
        threading.Thread(target=stuck.close, daemon=True).start()  # not the last reference
        return
    if kind == "lingering-adopted":
        stuck = stuck_socket(listen_on(port, rcvbuf=STUCK_BUFFER).getsockname()[1])
        send(conn, HANDOFF_ACK, [stuck.fileno()])
        rearm_then_close(stuck, 0.5)
        return
    listen_on(port)
    good = connected_to(port)
    if kind == "two":
        read_end, write_end = os.pipe()
        KEEP.append(write_end)
        send(conn, HANDOFF_ACK, [good.fileno(), read_end])
    elif kind == "many":
        send(conn, HANDOFF_ACK, [good.fileno()] * 10)
    elif kind == "unoffered":
        send(conn, PLAIN_ACK, [good.fileno()])
    elif kind == "bytes-after":
        send(conn, HANDOFF_ACK + b"HTTP/1.1 200 OK\r\n", [good.fileno()])
    else:
        raise SystemExit(f"unknown kind {kind!r}")


def serve(conn: socket.socket, kind: str, app_port: int) -> None:
    with conn:
        data = b""
        while b"\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                return
            data += chunk
        port = json.loads(data.split(b"\n")[0])["port"]
        if port == app_port:
            send(conn, HANDOFF_ACK, [connected_to(app_port).fileno()])
        else:
            misbehave(kind, conn, port, app_port)


# A listener that never accepts: the peer of the "lingering" sockets.
SINK = socket.socket(socket.AF_INET, socket.SOCK_STREAM)


def main() -> None:
    path, kind = sys.argv[1], sys.argv[2]
    SINK.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, STUCK_BUFFER)
    SINK.bind(("127.0.0.1", 0))
    SINK.listen(16)
    app = listen_on(0)
    app_port = app.getsockname()[1]
    threading.Thread(target=serve_app, args=(app,), daemon=True).start()
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    os.chmod(path, 0o600)
    server.listen(64)
    print(f"handoff shim listening app={app_port}", file=sys.stderr, flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve, args=(conn, kind, app_port), daemon=True).start()


if __name__ == "__main__":
    main()
