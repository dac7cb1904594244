"""A sandboxed client of the gate ports, driven step by step by a test.

Usage: gate_client.py FIFO. Reads one command a line from FIFO and prints one
``DONE <command> <result>`` line for each (``READY`` first, once FIFO is open):
``http URL`` (a GET through the egress proxy, the status and body),
``connect`` (a GET through a CONNECT tunnel, as curl -p does it), ``download URL``
(its size and SHA-256, streamed), ``silent N`` (N connections to the proxy that send
nothing, kept open), ``tunnel_open`` / ``tunnel_use`` (a CONNECT tunnel to
public.test:443 opened, then used later), ``quit``.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import urllib.request

GATE = "100.64.0.1"
PROXY = (GATE, 18081)
KEPT: list[socket.socket] = []


def curl(*args: str) -> str:
    """curl through the proxy the sandbox's environment names: its status and body."""
    result = subprocess.run(
        ["curl", "-sS", "-m", "20", "-o", "-", "-w", "\nstatus=%{http_code}", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    body, _, status = result.stdout.rpartition("\n")
    return f"{status} rc={result.returncode} body={body.strip()[:300]!r}"


def download(url: str) -> str:
    digest = hashlib.sha256()
    size = 0
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": f"http://{PROXY[0]}:{PROXY[1]}"})
    )
    with opener.open(url, timeout=60) as response:
        while chunk := response.read(256 * 1024):
            digest.update(chunk)
            size += len(chunk)
    return f"size={size} sha256={digest.hexdigest()}"


def silent(count: int) -> str:
    for _ in range(count):
        KEPT.append(socket.create_connection(PROXY, timeout=20))
    return f"open={count}"


def read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def tunnel_open() -> str:
    sock = socket.create_connection(PROXY, timeout=20)
    sock.sendall(b"CONNECT public.test:443 HTTP/1.1\r\nHost: public.test:443\r\n\r\n")
    KEPT.append(sock)
    return read_head(sock).split(b"\r\n")[0].decode()


def tunnel_use() -> str:
    sock = KEPT[-1]
    sock.sendall(b"GET /tunnelled HTTP/1.1\r\nHost: public.test\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return repr(data.partition(b"\r\n\r\n")[2].decode())


def main() -> int:
    commands = os.fdopen(os.open(sys.argv[1], os.O_RDWR), "r")  # RDWR: no wait for a writer
    print("READY", flush=True)
    for line in commands:
        name, _, argument = line.strip().partition(" ")
        if name == "quit":
            break
        if name == "http":
            result = curl(argument)
        elif name == "connect":
            result = curl("-p", argument)
        elif name == "download":
            result = download(argument)
        elif name == "silent":
            result = silent(int(argument))
        elif name == "tunnel_open":
            result = tunnel_open()
        elif name == "tunnel_use":
            result = tunnel_use()
        else:
            result = f"unknown command {name!r}"
        print(f"DONE {name} {result}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
