"""The first-byte benchmark's short run: every path, the Python floor relays included,
answers and is reported (no claim about speed)."""

from __future__ import annotations

import re
import socket
import threading

import pytest

from benchmarks.first_byte import socket_first_bytes
from tests.conftest import run_module


@pytest.mark.parametrize("client", ["curl", "socket"])
def test_short_run_reports_every_path_with_the_floor_relays(client: str) -> None:
    result = run_module(
        "benchmarks.first_byte",
        *("--blocks", "4", "--block", "2", "--floor", "--client", client, "--no-warm-up"),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reported = dict(
        re.findall(r"^(\S+)\s+ttfb median (\d+\.\d+) ms; paired ratio", result.stdout, re.M)
    )
    assert set(reported) == {"nginx", "sandbridge", "py-floor", "py-floor+http"}, result.stdout
    assert all(float(ms) > 0 for ms in reported.values()), reported


def test_the_socket_client_reads_a_first_byte_and_refuses_a_closed_connection() -> None:
    """What the socket client times is a real answer: a server that closes without a byte
    is an error naming the URL, not a fast sample."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        url = f"http://127.0.0.1:{port}/1k"

        def answer(first: bytes) -> None:
            conn, _ = server.accept()
            with conn:
                request = b""
                while not request.endswith(b"\r\n\r\n"):
                    request += conn.recv(4096)
                assert request.startswith(b"GET /1k HTTP/1.1\r\nHost: 127.0.0.1:"), request
                conn.sendall(first)

        thread = threading.Thread(target=answer, args=(b"HTTP/1.1 200 OK\r\n",))
        thread.start()
        (ms,) = socket_first_bytes(url, 1)
        thread.join()
        assert ms > 0
        thread = threading.Thread(target=answer, args=(b"",))
        thread.start()
        with pytest.raises(RuntimeError, match="closed before its first byte"):
            socket_first_bytes(url, 1)
        thread.join()
