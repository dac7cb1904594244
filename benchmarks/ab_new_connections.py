"""New app connections, this checkout against another, interleaved in one run.

``python -m benchmarks.ab_new_connections OTHER_SRC [ROUNDS] [--daemon]``: OTHER_SRC is
another checkout's ``src`` directory (its ``sandbridge`` package is imported first, through
``PYTHONPATH``, by the session's processes). With ``--daemon`` each session is a run that
a daemon of the same checkout serves (started for it in a private ``XDG_RUNTIME_DIR``;
its CPU and its minters' count). Each round starts one session of each, in
alternating order, with ``--app-pool-size 0`` so that every browser connection opens a
new app connection; it measures the median time to the first byte of 500 one-request
connections and their CPU (host, shim, socket minter), then wrk at c=64 for 5 s and
its CPU per request. Prints each round and the paired ratios this/other
(docs/benchmarks.md).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from benchmarks import paths, workloads
from benchmarks.new_connections import first_bytes
from benchmarks.relay_bench import make_files

CONNECTIONS = 500
WARM_UP = 50
LOAD_SECONDS = 5.0
FIGURES = ("ttfb_ms", "cpu_us_per_connection", "c64_rps", "cpu_us_per_request")


def start_daemon() -> subprocess.Popen[str]:
    """A daemon of the checkout ``PYTHONPATH`` names, in a private runtime dir of its own
    (set in this process's environment, which the session's run inherits)."""
    top = Path(tempfile.mkdtemp(prefix="sandbridge-ab-daemon-"))
    (top / "xdg").mkdir(mode=0o700)
    os.environ["XDG_RUNTIME_DIR"] = str(top / "xdg")
    os.environ["XDG_STATE_HOME"] = str(top / "state")
    daemon = subprocess.Popen(
        [*paths.SANDBRIDGE, "daemon"], stderr=subprocess.PIPE, text=True, cwd=top
    )
    assert daemon.stderr is not None
    while "serving on" not in daemon.stderr.readline():
        assert daemon.poll() is None, "the daemon did not start"
    return daemon


def measure(work: Path, other_src: str | None, daemon: bool = False) -> dict[str, float]:
    if other_src is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = other_src
    server = start_daemon() if daemon else None
    path = paths.sandbridge(work, (0, 0), ("--app-pool-size", "0"))
    try:
        parts = urlsplit(path.http)
        assert parts.port is not None
        first_bytes(parts.port, parts.netloc, WARM_UP, 0.0)
        pids = list(path.relay_pids)
        if server is not None:  # the host half and its minter are the daemon's
            pids += [server.pid, *paths.minters_of(server.pid)]
        before = workloads.cpu_seconds(pids)
        ttfb = first_bytes(parts.port, parts.netloc, CONNECTIONS, 0.0)
        per_connection = (workloads.cpu_seconds(pids) - before) / CONNECTIONS
        before = workloads.cpu_seconds(pids)
        load = workloads.wrk(path.http + "/1k", 64, LOAD_SECONDS)
        per_request = (workloads.cpu_seconds(pids) - before) / load["requests"]
    finally:
        path.stop()
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
    return {
        "ttfb_ms": ttfb,
        "cpu_us_per_connection": per_connection * 1e6,
        "c64_rps": float(load["rps"]),
        "cpu_us_per_request": per_request * 1e6,
    }


def main(other_src: str, rounds: int, daemon: bool = False) -> None:
    work = Path(tempfile.mkdtemp(prefix="sandbridge-ab-conn-"))
    os.chmod(work, 0o755)  # noqa: S103  (nginx's workers run as nobody under root)
    make_files(work, smoke=True)
    results: dict[str, list[dict[str, float]]] = {"this": [], "other": []}
    for index in range(rounds):
        order = ("other", "this") if index % 2 == 0 else ("this", "other")
        for label in order:
            row = measure(work, other_src if label == "other" else None, daemon)
            results[label].append(row)
            print(index, label, {k: round(v, 3) for k, v in row.items()}, flush=True)
    for figure in FIGURES:
        this = [row[figure] for row in results["this"]]
        other = [row[figure] for row in results["other"]]
        ratios = sorted(t / o for t, o in zip(this, other, strict=True))
        print(
            f"{figure}: other {statistics.median(other):.3f}, this {statistics.median(this):.3f}, "
            f"this/other paired {statistics.median(ratios):.2f}x "
            f"({ratios[0]:.2f} to {ratios[-1]:.2f})"
        )


if __name__ == "__main__":
    words = [word for word in sys.argv[1:] if word != "--daemon"]
    main(words[0], int(words[1]) if len(words) > 1 else 6, "--daemon" in sys.argv)
