"""New browser connections, one request each, with and without idle app connections.

A raw client (no process start between samples, unlike ``curl`` in ``relay_bench``)
opens a connection, sends one GET and reads the response, ``SAMPLES`` times in a row,
against a sandbridge session with its default pool of idle app connections and one
with ``--app-pool-size 0``; then again with a pause between connections, as a client
that is not a tight loop has. Prints the median time to the first byte and the host's
and shim's CPU per connection. ``python -m benchmarks.new_connections``.
"""

from __future__ import annotations

import socket
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from benchmarks import paths, workloads
from benchmarks.relay_bench import make_files

SAMPLES = 500
PAUSED_SAMPLES = 100
PAUSE_SECONDS = 0.005


def first_bytes(port: int, host: str, samples: int, pause: float) -> float:
    """Median ms from connect to the first byte of the response."""
    request = f"GET /1k HTTP/1.1\r\nHost: {host}\r\nAccept: */*\r\n\r\n".encode()
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(request)
            received = sock.recv(65536)
            times.append((time.perf_counter() - started) * 1e3)
            while len(received) < 1024:  # the 1 KiB body, then the client closes
                received += sock.recv(65536)
        if pause:
            time.sleep(pause)
    return statistics.median(times)


def measure(work: Path, label: str, extra: tuple[str, ...]) -> None:
    path = paths.sandbridge(work, (0, 0), extra)
    try:
        parts = urlsplit(path.http)
        assert parts.port is not None
        for samples, pause in ((SAMPLES, 0.0), (PAUSED_SAMPLES, PAUSE_SECONDS)):
            before = [workloads.cpu_seconds([pid]) for pid in path.relay_pids]
            ttfb = first_bytes(parts.port, parts.netloc, samples, pause)
            after = [workloads.cpu_seconds([pid]) for pid in path.relay_pids]
            cpu = [round((a - b) / samples * 1e6) for a, b in zip(after, before, strict=True)]
            print(
                f"{label:8} pause {pause * 1e3:g} ms: ttfb {ttfb:.3f} ms, "
                f"cpu us/connection host {cpu[0]} shim {sum(cpu[1:])}"
            )
    finally:
        path.stop()


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="sandbridge-newconn-"))
    make_files(work, smoke=True)
    for _ in range(2):
        measure(work, "pool", ())
        measure(work, "no pool", ("--app-pool-size", "0"))


if __name__ == "__main__":
    main()
