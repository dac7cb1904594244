"""Soak: good and hostile clients together against one session, for a fixed time.

Afterwards every good request has succeeded, and the relay's descriptors and memory are
back near where they started.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import random
import socket
import threading
import time
from pathlib import Path

from sandbridge.relay.host.owned_upstream import POOL_SIZE
from tests.conftest import ECHO_APP, PYTHON, Process, app_host, host_port_of, run_argv
from tests.e2e.features import rss_kib

SOAK_SECONDS = float(os.environ.get("SANDBRIDGE_SOAK_SECONDS", "15"))
GOOD_WORKERS = 8
HOSTILE_WORKERS = 8


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def good_client(port: int, stop: threading.Event, results: list[str]) -> None:
    rng = random.Random(port)
    conn = http.client.HTTPConnection(app_host(port), port, timeout=30)
    while not stop.is_set():
        try:
            if rng.random() < 0.5:
                conn.request("GET", f"/g?{rng.random()}")
                ok = json.loads(conn.getresponse().read())["method"] == "GET"
            else:
                body = os.urandom(rng.randint(0, 200_000))
                conn.request("POST", "/p", body=body)
                report = json.loads(conn.getresponse().read())
                ok = report["body_sha256"] == hashlib.sha256(body).hexdigest()
            results.append("ok" if ok else "wrong")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            results.append(f"error {exc!r}")
            conn.close()
            conn = http.client.HTTPConnection(app_host(port), port, timeout=30)
    conn.close()


def hostile_client(port: int, seed: int, stop: threading.Event) -> None:
    rng = random.Random(seed)
    host = f"Host: {app_host(port)}:{port}\r\n".encode()
    attacks = [
        b"GET / HTTP/1.1\r\n" + host,  # slowloris: never finishes
        b"\x16\x03\x01\x02\x00garbage" + os.urandom(100),
        b"GET / HTTP/1.1\r\n" + host + b"X-Big: " + b"a" * 100_000 + b"\r\n\r\n",
        b"POST / HTTP/1.1\r\n" + host + b"Content-Length: 1000000\r\n\r\n" + b"x" * 10_000,
        b"POST / HTTP/1.1\r\n"
        + host
        + b"Origin: http://evil.example\r\nContent-Length: 1\r\n\r\nx",
        b"GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
        b"GET http://example.com/ HTTP/1.1\r\n" + host + b"\r\n",
        b"POST / HTTP/1.1\r\n" + host + b"Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"",
    ]
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(rng.choice(attacks))
                if rng.random() < 0.5:
                    sock.recv(4096)
        except OSError:
            pass


def wait_for(condition: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.1)  # observation interval of a measurement, not synchronisation
    return bool(condition())  # type: ignore[operator]


def test_soak_with_good_and_hostile_clients(tmp_path: Path) -> None:
    process = Process(
        run_argv(
            tmp_path,
            PYTHON,
            ECHO_APP,
            "--register",
            "4173",
            "--register",
            "4174",
            options=(
                "--keepalive-timeout",
                "1",
                "--header-timeout",
                "1",
                "--response-timeout",
                "10",
            ),
        )
    )
    try:
        report = json.loads(process.wait_line("READY").removeprefix("READY "))
        ports = [host_port_of(url) for url in report["urls"]]
        host_pid = process.popen.pid
        warm: list[str] = []
        warm_stop = threading.Event()
        warm_stop.set()
        for port in ports:
            good_client(port, warm_stop, warm)
            http.client.HTTPConnection(app_host(port), port).request("GET", "/")
        fds_before, rss_before = fd_count(host_pid), rss_kib(host_pid)

        stop = threading.Event()
        results: list[str] = []
        threads = [
            threading.Thread(target=good_client, args=(ports[i % 2], stop, results))
            for i in range(GOOD_WORKERS)
        ] + [
            threading.Thread(target=hostile_client, args=(ports[i % 2], i, stop))
            for i in range(HOSTILE_WORKERS)
        ]
        for thread in threads:
            thread.start()
        stop.wait(SOAK_SECONDS)  # the soak's fixed duration
        stop.set()
        for thread in threads:
            thread.join(60)

        failures = [r for r in results if r != "ok"]
        assert len(results) > 100 and not failures, failures[:5]
        # The socket minter keeps up to POOL_SIZE unconnected sockets ready for new app
        # connections (relay/host/owned_upstream.py): fuller after than before, never more.
        bound = fds_before + 4 + POOL_SIZE
        assert wait_for(lambda: fd_count(host_pid) <= bound, 15), (
            f"descriptors: {fds_before} before, {fd_count(host_pid)} after"
        )
        assert rss_kib(host_pid) < rss_before + 16 * 1024
        assert rss_kib(host_pid) < 64 * 1024
    finally:
        process.stop()
