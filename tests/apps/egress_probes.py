"""Egress probes run inside a sandbox: each prints one ``PROBE <name> <result>`` line.

Usage: egress_probes.py NAME... (see PROBES). Results are short and stable so tests can
compare them: ``status=403 body=...``, ``connected``, ``error=ENETUNREACH``.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import threading

GATE = os.environ.get("SANDBRIDGE_TEST_GATE", "100.64.0.1")
PROXY = (GATE, 18081)


def curl(*args: str) -> str:
    result = subprocess.run(
        ["curl", "-sS", "-m", "20", "-o", "-", "-w", "\nstatus=%{http_code}", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    body, _, status = result.stdout.rpartition("\n")
    return f"{status} rc={result.returncode} body={body.strip()[:300]!r}"


def raw(request: bytes, address: tuple[str, int] = PROXY) -> str:
    """Send ``request`` to ``address``; report the status line and body."""
    try:
        with socket.create_connection(address, timeout=20) as sock:
            sock.sendall(request)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
                if b"\r\n\r\n" in data and not data.startswith(b"HTTP/1.1 200 Connection"):
                    head, _, _ = data.partition(b"\r\n\r\n")
                    length = [
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ]
                    if length and len(data) >= len(head) + 4 + length[0]:
                        break
                if data.startswith(b"HTTP/1.1 200 Connection") and b"hello" in data:
                    break
    except OSError as exc:
        return f"error={errno.errorcode.get(exc.errno or 0, str(exc))}"
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n")[0].decode(errors="replace")
    return f"{status!r} body={body.decode(errors='replace').strip()[:400]!r}"


def connect(host: str, port: int) -> str:
    try:
        with socket.create_connection((host, port), timeout=5):
            return "connected"
    except OSError as exc:
        return f"error={errno.errorcode.get(exc.errno or 0, str(exc))}"


def second_proxy() -> str:
    """The agent's own forwarding proxy on 127.0.0.1: it has no route out either."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        client, _ = listener.accept()
        with client:
            client.recv(65536)
            try:
                upstream = socket.create_connection(("8.8.0.1", 80), timeout=5)
                upstream.close()
                client.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nreached")
            except OSError as exc:
                message = errno.errorcode.get(exc.errno or 0, "error").encode()
                reply = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: %d\r\n\r\n" % len(message)
                client.sendall(reply + message)

    threading.Thread(target=serve, daemon=True).start()
    return curl("-x", f"http://127.0.0.1:{port}", "http://public.test/")


def direct_gate(port: int, request: bytes = b"") -> str:
    """Skip the gate listener: talk to the host's egress.sock directly, as an agent could."""
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(20)
            sock.connect("/run/ags-webview-relay/egress.sock")
            sock.sendall(b'{"type":"egress","port":%d}\n' % port + request)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
    except OSError as exc:
        return f"error={errno.errorcode.get(exc.errno or 0, str(exc))}"
    return repr(data.decode(errors="replace")[:400])


def python_https(url: str) -> str:
    """Python's own HTTPS client through the proxy (what pip and requests build on)."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=20) as response:
            return f"status={response.status}"
    except OSError as exc:
        return f"error={exc}"


LEFT_OPEN: list[socket.socket] = []


def idle_connection() -> str:
    """A host-service connection left open and idle until this process exits."""
    sock = socket.create_connection((GATE, 5432), timeout=5)
    LEFT_OPEN.append(sock)
    return "open"


def add_address() -> str:
    from sandbridge.sandbox.net_init import add_address as add

    try:
        add("lo", "8.8.0.9")
    except OSError as exc:
        return f"error={errno.errorcode.get(exc.errno or 0, str(exc))}"
    return "added"


PROBES = {
    "host_service": lambda: curl(f"http://{GATE}:5432/"),
    "host_neighbour": lambda: curl(f"http://{GATE}:5433/"),
    "allowed_http": lambda: curl("http://public.test/"),
    "allowed_connect": lambda: curl("-p", "http://public.test:443/"),
    "wildcard": lambda: curl("http://sub.wild.test/"),
    "refused_domain": lambda: curl("http://other.test/"),
    "refused_https_python": lambda: python_https("https://other.test/"),
    "connect_ip_literal": lambda: raw(b"CONNECT 8.8.0.1:443 HTTP/1.1\r\nHost: 8.8.0.1:443\r\n\r\n"),
    "connect_loopback_name": lambda: raw(
        b"CONNECT loopy.test:80 HTTP/1.1\r\nHost: loopy.test:80\r\n\r\n"
    ),
    "connect_self_name": lambda: raw(
        b"CONNECT selfpub.test:80 HTTP/1.1\r\nHost: selfpub.test:80\r\n\r\n"
    ),
    "connect_bad_port": lambda: raw(
        b"CONNECT public.test:8080 HTTP/1.1\r\nHost: public.test:8080\r\n\r\n"
    ),
    "host_mismatch": lambda: raw(b"GET http://public.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n"),
    "pipelined_second_host": lambda: raw(
        b"GET http://public.test/one HTTP/1.1\r\nHost: public.test\r\n\r\n"
        b"GET http://other.test/two HTTP/1.1\r\nHost: other.test\r\n\r\n"
    ),
    "gate_as_proxy_destination": lambda: raw(
        b"CONNECT 100.64.0.1:5432 HTTP/1.1\r\nHost: 100.64.0.1:5432\r\n\r\n"
    ),
    "direct_gate_port": lambda: direct_gate(5433),
    "direct_gate_connect": lambda: direct_gate(
        18081, b"CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n"
    ),
    "raw_public": lambda: connect("8.8.0.1", 80),
    "raw_other": lambda: connect("8.8.0.2", 80),
    "raw_loopback_service": lambda: connect("127.0.0.1", 5432),
    "raw_gate_other_port": lambda: connect(GATE, 22),
    "second_proxy": second_proxy,
    "add_address": add_address,
    "idle_connection": idle_connection,
}


def main() -> int:
    for name in sys.argv[1:] or list(PROBES):
        print(f"PROBE {name} {PROBES[name]()}", flush=True)
    print("PROBES DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
