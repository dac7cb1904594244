"""Time to first byte on new connections, sandbridge against nginx two-hop, paired.

``relay_bench``'s ``ttfb_ms`` is 30 ``curl`` runs per path per round: on a loaded
2-core machine one slow stretch moves a round's median by milliseconds. Here the
paths run side by side for the whole measurement and take turns in short blocks of
``curl`` runs (the same command as ``relay_bench``: one new connection, one ``GET /1k``
each), in an order that rotates from block to block; each block's median is divided by
nginx's in the same turn, and the median of those ratios is reported with its
quartiles. ``--other LABEL=DIR`` adds a sandbridge whose host imports ``sandbridge``
from ``DIR`` (another checkout's ``src``), to compare trees in one run.

``--floor`` adds two reference relays (``benchmarks.floor_relay``): the least a Python relay
on uvloop does per new connection, with and without HTTP.

``--client socket`` times each new connection from this process instead of a ``curl`` run:
connect, send the request ``curl`` sends, read one byte. No process starts between two
connections, so the relay's code is not evicted from the caches by one, and the spread is
smaller; what is left is the relay's own cost per connection (docs/benchmarks.md).

    python -m benchmarks.first_byte [--blocks 40] [--block 10] [--other base=../main/src] [--floor]
                                    [--client curl|socket] [--no-warm-up]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from benchmarks import paths, workloads
from benchmarks.relay_bench import make_files


def first_bytes(url: str, samples: int) -> list[float]:
    """``curl``'s time to first byte, ms, for ``samples`` new connections in a row."""
    return [
        float(
            subprocess.run(
                ["curl", "-sf", "-o", "/dev/null", "-w", "%{time_starttransfer}", url],
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
            ).stdout
        )
        * 1000
        for _ in range(samples)
    ]


def socket_first_bytes(url: str, samples: int) -> list[float]:
    """The time to first byte, ms, for ``samples`` new connections in a row from this
    process: ``connect``, the request ``curl`` sends, one byte read (the connection closed
    after it, as ``curl`` does once it has read the rest)."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None, url
    request = (
        f"GET {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        "User-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n"
    ).encode()
    times = []
    for _ in range(samples):
        with socket.socket() as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(60)
            start = time.perf_counter()
            conn.connect(("127.0.0.1", parts.port))
            conn.sendall(request)
            if not conn.recv(1):
                raise RuntimeError(f"{url}: the connection closed before its first byte")
            times.append((time.perf_counter() - start) * 1000)
    return times


def sandbridge_from(work: Path, ports: tuple[int, int], src: str | None) -> paths.RelayPath:
    """A sandbridge path whose host imports the package from ``src`` (None: this tree)."""
    saved = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = src
    try:
        return paths.sandbridge(work, ports)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.first_byte")
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--block", type=int, default=10, help="curl runs per path per turn")
    parser.add_argument("--other", action="append", default=[], metavar="LABEL=DIR")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="add the Python floor relays (benchmarks.floor_relay): bytes only, and with HTTP",
    )
    parser.add_argument(
        "--client",
        choices=("curl", "socket"),
        default="curl",
        help="a curl run per connection (as relay_bench), or connections from this process",
    )
    parser.add_argument(
        "--no-warm-up",
        action="store_true",
        help="skip the 1 s of load each path gets first (a short run that claims no speed)",
    )
    args = parser.parse_args(argv)
    measure = first_bytes if args.client == "curl" else socket_first_bytes
    with (
        tempfile.TemporaryDirectory(prefix="sandbridge-first-byte-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        work = Path(tmp)
        os.chmod(work, 0o755)  # noqa: S103  (nginx's workers read www as nobody under root)
        make_files(work, smoke=True)
        ports = stack.enter_context(paths.host_apps(work))
        starts: list[tuple[str, Callable[[], paths.RelayPath]]] = [
            ("nginx", functools.partial(paths.nginx_two_hop, work, ports)),
            ("sandbridge", functools.partial(sandbridge_from, work, ports, None)),
        ]
        if args.floor:
            starts += [
                ("py-floor", functools.partial(paths.python_floor, work, ports)),
                ("py-floor+http", functools.partial(paths.python_floor, work, ports, True)),
            ]
        for other in args.other:
            label, src = other.split("=", 1)
            starts.append((label, functools.partial(sandbridge_from, work, ports, src)))
        urls = {}
        for name, start in starts:
            path = start()
            stack.callback(path.stop)
            urls[name] = path.http + "/1k"
            if not args.no_warm_up:
                workloads.wrk(urls[name], 16, 1)  # the warm-up relay_bench gives every path
        names = list(urls)
        blocks: dict[str, list[float]] = {name: [] for name in names}
        samples: dict[str, list[float]] = {name: [] for name in names}
        for index in range(args.blocks):
            by = index % len(names)
            for name in names[by:] + names[:by]:
                times = measure(urls[name], args.block)
                samples[name] += times
                blocks[name].append(statistics.median(times))
        for name in names:
            ratios = [a / b for a, b in zip(blocks[name], blocks["nginx"], strict=True)]
            low, mid, high = statistics.quantiles(ratios, n=4)
            print(
                f"{name:14} ttfb median {statistics.median(samples[name]):.3f} ms; "
                f"paired ratio to nginx {mid:.2f} (quartiles {low:.2f}-{high:.2f})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
