"""The workloads, each measuring one path with an external client (wrk, curl) or a small
asyncio client (WebSocket, SSE), plus the relay's CPU and memory from /proc."""

from __future__ import annotations

import asyncio
import contextlib
import re
import statistics
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path

from websockets.asyncio.client import connect

from benchmarks import proc
from benchmarks.paths import _descendants, address_of

# A smoke run's wrk load: one thread, which stops wrk after this many responses. wrk's
# shortest run is a second, and a second at full speed through every path was most of a
# smoke run's CPU, for figures that only have to show the path carries requests; a second
# of waiting for each of some twenty loads was most of its wall time.
SMOKE_REQUESTS = 200
STOP_AFTER = Path(__file__).with_name("wrk_stop_after.lua")
# A smoke run's large body, in MiB (a full run's is 100): still many of a relay's buffers
# (256 KiB), a fraction of the CPU of carrying 8 through the Python relays (v1's JSON,
# jupyter's proxy) and through SSH.
SMOKE_BIG = 2
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if not match:
        raise ValueError(f"unexpected wrk latency {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _dialled(url: str) -> str:
    """``url`` with a ``*.localhost`` name replaced by 127.0.0.1 (see :func:`address_of`)."""
    parts = urllib.parse.urlsplit(url)
    address, port, _ = address_of(url)
    return parts._replace(netloc=f"{address}:{port}").geturl()


def wrk(
    url: str,
    connections: int,
    seconds: float,
    host_field: str | None = None,
    requests: int | None = None,
) -> dict[str, float]:
    """Keep-alive GETs at a fixed concurrency: requests/s and latency percentiles.
    ``host_field``: the Host to send when it is not the URL's (a tunnel's far name).
    ``requests``: stop after this many responses (a smoke run's load: one thread, which
    ends wrk there, ``wrk_stop_after.lua``); it says the path works, not its speed."""
    threads = 1 if connections < 2 or requests is not None else 2
    _, _, host = address_of(url)
    if host_field is not None:
        host = ["-H", f"Host: {host_field}"]
    target = _dialled(url)
    stop_after = [] if requests is None else ["-s", str(STOP_AFTER)]
    limit = [] if requests is None else [str(requests)]
    result = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{max(seconds, 1):g}s",
            "--latency",
            *host,
            *stop_after,
            target,
            *limit,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 60,
    )
    out = result.stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"\s50%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"\s99%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)", out)
    if errors:
        raise RuntimeError(f"wrk saw errors against {url}: {errors.group(0)}")
    done = float(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    return {"rps": rps, "p50_ms": p50, "p99_ms": p99, "requests": done}


def bulk_get(url: str, host_field: str | None = None) -> float:
    """One large GET on a fresh connection: MB/s (10^6 bytes per second)."""
    host = [] if host_field is None else ["-H", f"Host: {host_field}"]
    out = subprocess.run(
        ["curl", "-sf", "-o", "/dev/null", "-w", "%{speed_download} %{size_download}", *host, url],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout.split()
    return float(out[0]) / 1e6


def bulk_post(url: str, file: Path) -> float:
    """One large POST streamed from a file: MB/s."""
    out = subprocess.run(
        [
            "curl",
            "-sf",
            "-o",
            "/dev/null",
            "-X",
            "POST",
            "-T",
            str(file),
            "-H",
            "Expect:",
            "-w",
            "%{speed_upload}",
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    return float(out) / 1e6


def ttfb(url: str, samples: int) -> float:
    """Median time to first byte on a new connection, in ms."""
    times = []
    for _ in range(samples):
        out = subprocess.run(
            ["curl", "-sf", "-o", "/dev/null", "-w", "%{time_starttransfer}", url],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        times.append(float(out) * 1000)
    return statistics.median(times)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def ws_echo(
    url: str, seconds: float, connections: int = 4, messages: int | None = None
) -> dict[str, float]:
    """1 KiB text messages echoed over ``connections`` sockets: messages/s, RTT.
    ``messages``: stop after about this many echoes (a smoke run's load, as
    :func:`wrk`'s ``requests``), or at ``seconds`` if that comes first."""
    ws_url = url.replace("http://", "ws://", 1) + "/ws"
    address, port, _ = address_of(url)
    message = "x" * 1024
    per_socket = None if messages is None else max(1, messages // connections)

    async def one(rtts: list[float], deadline: float) -> int:
        count = 0
        async with connect(ws_url, max_size=None, compression=None, host=address, port=port) as ws:
            # One echo at least, however long the connect took (a smoke run's load is short).
            while count == 0 or (time.monotonic() < deadline and count != per_socket):
                started = time.perf_counter()
                await ws.send(message)
                await ws.recv()
                rtts.append((time.perf_counter() - started) * 1000)
                count += 1
        return count

    async def run() -> dict[str, float]:
        rtts: list[float] = []
        started = time.monotonic()
        counts = await asyncio.gather(*(one(rtts, started + seconds) for _ in range(connections)))
        elapsed = time.monotonic() - started
        return {
            "msgs_per_s": sum(counts) / elapsed,
            "rtt_p50_ms": _percentile(rtts, 0.5),
            "rtt_p99_ms": _percentile(rtts, 0.99),
        }

    return asyncio.run(run())


def sse_latency(url: str, events: int) -> dict[str, float]:
    """Delay between the app writing an event and the client reading it, in ms."""

    async def run() -> dict[str, float]:
        host, _, rest = url.removeprefix("http://").partition("/")
        address, port, _ = address_of(url)
        reader, writer = await asyncio.open_connection(address, port)
        path = (
            "/" + rest + f"/sse?interval_ms=10&count={events}"
            if rest
            else (f"/sse?interval_ms=10&count={events}")
        )
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        delays: list[float] = []
        while len(delays) < events:
            line = await reader.readline()
            if not line:
                break
            marker = line.find(b"data: ")
            if marker >= 0:
                delays.append((time.time() - float(line[marker + 6 :])) * 1000)
        writer.close()
        return {"p50_ms": _percentile(delays, 0.5), "p99_ms": _percentile(delays, 0.99)}

    return asyncio.run(run())


def open_websockets(url: str, count: int, measure: object) -> object:
    """Hold ``count`` idle WebSockets open through the path while ``measure()`` runs."""
    ws_url = url.replace("http://", "ws://", 1) + "/ws"
    address, port, _ = address_of(url)

    async def run() -> object:
        sockets = []
        try:
            for start in range(0, count, 100):
                batch = await asyncio.gather(
                    *(
                        connect(ws_url, compression=None, host=address, port=port)
                        for _ in range(min(100, count - start))
                    )
                )
                sockets.extend(batch)
            for ws in sockets[:: max(1, count // 10)] or []:
                await ws.send("ping")
                await ws.recv()
            return measure()  # type: ignore[operator]
        finally:
            await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)

    return asyncio.run(run())


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of the relay processes and their reaped children."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += proc.cpu_seconds(pid)
    return total


def rss_kib(pid: int, key: str = "VmRSS") -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _tree(pids: list[int]) -> list[int]:
    """The relay processes and their descendants (socat forks one per connection)."""
    return sorted({*pids, *(child for pid in pids for child in _descendants(pid))})


def relay_processes(pids: list[int], forks: bool) -> list[int]:
    """The relay's processes: as listed, plus their descendants for a forking relay."""
    return _tree(pids) if forks else pids


def relay_rss_total(pids: list[int], forks: bool = False) -> int:
    return sum(rss_kib(pid) for pid in relay_processes(pids, forks))


class PeakMemory:
    """Samples the relay's processes every 50 ms; the largest single-process RSS seen."""

    def __init__(self, pids: list[int], forks: bool = False) -> None:
        self.pids = pids
        self.forks = forks
        self.peak_kib = max((rss_kib(pid, "VmHWM") for pid in pids), default=0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for pid in relay_processes(self.pids, self.forks):
                self.peak_kib = max(self.peak_kib, rss_kib(pid))

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for pid in self.pids:
            self.peak_kib = max(self.peak_kib, rss_kib(pid, "VmHWM"))
