"""Benchmark sandbridge side by side with the relays a user could pick instead.

    python -m benchmarks.relay_bench [--rounds 3] [--seconds 5] [--json results.json]
    python -m benchmarks.relay_bench --smoke      # seconds-long run that checks it works
    python -m benchmarks.relay_bench --workloads ws sse c1   # only these, no scaling series
    python -m benchmarks.relay_bench --other ../main/src     # another checkout beside this one

Every path is client -> relay -> app on loopback, the app being nginx with sendfile (and
a small aiohttp app for WebSocket and SSE), the same behind every path. Paths run in
rounds that interleave them in a rotating order; each figure is the median over rounds,
and also a ratio to direct and to nginx measured in the same round.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks import paths, workloads
from benchmarks.paths import (
    PATHS,
    SANDBRIDGE,
    RelayPath,
    host_apps,
    start_at_once,
    wait_until_serving,
)
from benchmarks.remote_bench import measure_remote
from benchmarks.remote_bench import table as remote_table
from benchmarks.sessions import EGRESS_BYTES, EGRESS_DOWNLOADS, measure_sessions
from benchmarks.sessions import table as sessions_table

MIB = 1024 * 1024
# Which direction is better, per metric, for the printed table.
HIGHER_IS_BETTER = ("rps", "mbps", "msgs_per_s")
# The workloads of a round (``--workloads`` picks some), and ``scaling``: the series run once
# after the rounds (concurrency, sizes, idle WebSockets, registered apps) and the sessions.
WORKLOADS = ("c1", "c64", "bulk", "ttfb", "sse", "ws", "scaling")


def versions() -> dict[str, str]:
    def run(*argv: str) -> str:
        try:
            result = subprocess.run(argv, capture_output=True, text=True, check=False)
        except OSError:
            return "missing"
        return (
            (result.stdout + result.stderr).strip().splitlines()[0]
            if (result.stdout + result.stderr).strip()
            else "?"
        )

    import sandbridge

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.machine(),
    )
    try:
        from importlib.metadata import version

        jsp = version("jupyter-server-proxy")
    except Exception:
        jsp = "missing"
    return {
        "machine": f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "sandbridge": sandbridge.__version__,
        "nginx": run("nginx", "-v"),
        "socat": run("socat", "-V")
        .replace("socat by Gerhard Rieger and contributors - see www.dest-unreach.org", "")
        .strip()
        or run("socat", "-V"),
        "wrk": run("wrk", "-v"),
        "curl": run("curl", "--version"),
        "jupyter-server-proxy": jsp,
    }


def make_files(work: Path, smoke: bool, series: bool = True) -> dict[str, Path]:
    """The app's files; the 1 GiB one only for a full run's size series (``series``)."""
    www = work / "www"
    www.mkdir()
    files = {
        "1k": 1024,
        "64k": 64 * 1024,
        "1m": MIB,
        "100m": (workloads.SMOKE_BIG if smoke else 100) * MIB,
    }
    if series and not smoke:
        files["1g"] = 1024 * MIB
    paths = {}
    for name, size in files.items():
        path = www / name
        with path.open("wb") as out:
            block = os.urandom(MIB)
            remaining = size
            while remaining > 0:
                out.write(block[: min(remaining, MIB)])
                remaining -= MIB
        paths[name] = path
    return paths


class Results:
    """Per path, per metric: the value of each round."""

    def __init__(self) -> None:
        self.rounds: dict[str, dict[str, list[float]]] = {}
        self.once: dict[str, dict[str, object]] = {}

    def add(self, path: str, metric: str, value: float | None) -> None:
        if value is not None:
            self.rounds.setdefault(path, {}).setdefault(metric, []).append(value)

    def median(self, path: str, metric: str) -> float | None:
        values = self.rounds.get(path, {}).get(metric)
        return statistics.median(values) if values else None

    def ratio(self, path: str, metric: str, reference: str) -> float | None:
        """Median over rounds of this path's value over the reference's in the same round."""
        mine = self.rounds.get(path, {}).get(metric, [])
        theirs = self.rounds.get(reference, {}).get(metric, [])
        ratios = [a / b for a, b in zip(mine, theirs, strict=False) if b]
        return statistics.median(ratios) if ratios else None


def fits(path: RelayPath, file: Path) -> bool:
    """Whether the path can carry this file as one body (v1 cannot carry large ones)."""
    return path.max_body is None or file.stat().st_size <= path.max_body


def measure_round(
    path: RelayPath, results: Results, args: argparse.Namespace, files: dict[str, Path]
) -> None:
    name = path.name
    small = path.http + "/1k"
    chosen = args.workloads
    if "c1" in chosen:
        c1 = workloads.wrk(small, 1, args.seconds, requests=args.requests)
        results.add(name, "c1_rps", c1["rps"])
        results.add(name, "c1_p50_ms", c1["p50_ms"])
        results.add(name, "c1_p99_ms", c1["p99_ms"])
    if "c64" in chosen:
        cpu_before = workloads.cpu_seconds(path.relay_pids)
        c64 = workloads.wrk(small, 64, args.seconds, requests=args.requests)
        cpu = workloads.cpu_seconds(path.relay_pids) - cpu_before
        results.add(name, "c64_rps", c64["rps"])
        results.add(name, "c64_p50_ms", c64["p50_ms"])
        results.add(name, "c64_p99_ms", c64["p99_ms"])
        if path.relay_pids:
            results.add(name, "cpu_us_per_req", cpu / c64["requests"] * 1e6)
    if "bulk" in chosen and fits(path, files["100m"]):
        results.add(name, "get_100m_mbps", workloads.bulk_get(path.http + "/100m"))
        results.add(name, "post_100m_mbps", workloads.bulk_post(path.http + "/sink", files["100m"]))
    if "ttfb" in chosen:
        results.add(name, "ttfb_ms", workloads.ttfb(small, args.ttfb_samples))
    if "sse" in chosen:
        sse = workloads.sse_latency(path.stream, args.sse_events)
        results.add(name, "sse_p50_ms", sse["p50_ms"])
        results.add(name, "sse_p99_ms", sse["p99_ms"])
    if "ws" in chosen and path.supports_websocket:
        ws = workloads.ws_echo(path.stream, args.seconds, messages=args.requests)
        results.add(name, "ws_msgs_per_s", ws["msgs_per_s"])
        results.add(name, "ws_rtt_p50_ms", ws["rtt_p50_ms"])
        results.add(name, "ws_rtt_p99_ms", ws["rtt_p99_ms"])


def measure_scaling(
    path: RelayPath, results: Results, args: argparse.Namespace, files: dict[str, Path]
) -> None:
    name = path.name
    scaling: dict[str, object] = {}
    scaling["rps_by_concurrency"] = {
        str(c): workloads.wrk(path.http + "/1k", c, args.seconds, requests=args.requests)["rps"]
        for c in args.concurrency
    }
    by_size: dict[str, float | str | None] = {}
    for size, file in files.items():
        if size == "100m":
            by_size[size] = results.median(name, "get_100m_mbps")
        elif fits(path, file):
            try:
                by_size[size] = workloads.bulk_get(f"{path.http}/{size}")
            except subprocess.CalledProcessError as failed:
                by_size[size] = f"failed (curl exit {failed.returncode})"
    scaling["mbps_by_size"] = by_size
    if path.supports_websocket and name in ("direct", "sandbridge", "nginx"):
        by_count = {}
        for count in args.websockets:
            try:
                by_count[str(count)] = workloads.open_websockets(
                    path.stream,
                    count,
                    lambda: workloads.relay_rss_total(path.relay_pids, path.forks),
                )
            except Exception as failed:  # a path that cannot hold them: say so, go on
                by_count[str(count)] = f"failed: {failed}"
                break
        scaling["relay_rss_kib_by_open_websockets"] = by_count
        if (
            path.relay_pids
            and len(by_count) == len(args.websockets) > 1
            and all(isinstance(value, int) for value in by_count.values())
        ):
            low, high = args.websockets[0], args.websockets[-1]
            scaling["kib_per_idle_websocket"] = (
                (by_count[str(high)] - by_count[str(low)]) / (high - low)  # type: ignore[operator]
            )
    results.once.setdefault(name, {}).update(scaling)


def measure_apps(work: Path, http_port: int, args: argparse.Namespace) -> dict[str, object]:
    """Registration latency and per-request cost with 1 to 256 registered apps."""
    runtime = work / "apps-runtime"
    runtime.mkdir(mode=0o700)
    host = subprocess.Popen(
        [*SANDBRIDGE, "host", "--runtime-dir", str(runtime), "--max-apps", "300"],
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    shim = subprocess.Popen(
        [*SANDBRIDGE, "shim", "--socket", str(runtime / "upstream.sock")],
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        for process, marker in ((host, b"serving registrations"), (shim, b"shim listening")):
            paths.read_line(process, marker, "stderr", contains=True)
            paths.drain(process)

        def register() -> tuple[float, str]:
            started = time.perf_counter()
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(str(runtime / "relay.sock"))
                sock.sendall(json.dumps({"type": "register", "port": http_port}).encode() + b"\n")
                answer = b""
                while chunk := sock.recv(4096):
                    answer += chunk
            return (time.perf_counter() - started) * 1000, json.loads(answer)["url"]

        latencies, urls = [], []
        for _ in range(max(args.apps)):
            latency, url = register()
            latencies.append(latency)
            urls.append(url.rstrip("/"))
        wait_until_serving(urls[0] + "/1k")
        return {
            "registration_p50_ms": statistics.median(latencies),
            "registration_p99_ms": sorted(latencies)[int(0.99 * (len(latencies) - 1))],
            "rps_by_registered_apps": {
                str(count): workloads.wrk(
                    urls[count - 1] + "/1k", 64, args.seconds, requests=args.requests
                )["rps"]
                for count in args.apps
            },
        }
    finally:
        for process in (shim, host):
            process.terminate()
            process.wait(10)


def _rotate(items: list[str], by: int) -> list[str]:
    by %= len(items)
    return items[by:] + items[:by]


def run(args: argparse.Namespace) -> dict[str, object]:
    report: dict[str, object] = {
        "versions": versions(),
        "settings": {"rounds": args.rounds, "seconds": args.seconds, "smoke": args.smoke},
    }
    with (
        tempfile.TemporaryDirectory(prefix="sandbridge-bench-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        work = Path(tmp)
        # nginx's workers run as nobody when the benchmark runs as root: they must read www.
        os.chmod(work, 0o755)  # noqa: S103
        files = make_files(work, args.smoke, "scaling" in args.workloads)
        ports = stack.enter_context(host_apps(work))
        starts: dict[str, Callable[[], RelayPath]] = {
            name: functools.partial(PATHS[name], work, ports) for name in args.paths
        }
        if args.other is not None:  # another checkout's sandbridge beside this one's
            starts["other"] = functools.partial(
                paths.sandbridge, work, ports, other_src=str(args.other)
            )
        running = start_at_once(starts)
        for path in running.values():
            stack.callback(path.stop)
        peaks = {
            name: stack.enter_context(workloads.PeakMemory(path.relay_pids, path.forks))
            for name, path in running.items()
            if path.relay_pids
        }
        if not args.smoke:  # a smoke run claims no speed: nothing to warm up for
            for path in running.values():
                workloads.wrk(path.http + "/1k", 16, 1)
        results = Results()
        names = list(running)
        for index in range(args.rounds):
            for name in _rotate(names, index):
                print(f"round {index + 1}/{args.rounds}: {name}", file=sys.stderr, flush=True)
                measure_round(running[name], results, args, files)
        scaling = "scaling" in args.workloads
        for name in _rotate(names, args.rounds) if scaling else []:
            print(f"scaling: {name}", file=sys.stderr, flush=True)
            measure_scaling(running[name], results, args, files)
        if "sandbridge" in running and scaling:
            print("scaling: registered apps", file=sys.stderr, flush=True)
            results.once.setdefault("sandbridge", {})["apps"] = measure_apps(work, ports[0], args)
        for name, peak in peaks.items():
            results.once.setdefault(name, {})["peak_rss_kib_during_run"] = peak.peak_kib
        if "sandbridge" in running and args.sessions and scaling:
            print("sessions: start and idle memory", file=sys.stderr, flush=True)
            results.once["sessions"] = measure_sessions(*args.sessions)
            print("remote: a far app through connect and ssh -L", file=sys.stderr, flush=True)
            results.once["remote"] = measure_remote(args.rounds, args.seconds, args.smoke)
        report["medians"] = {
            name: {metric: results.median(name, metric) for metric in metrics}
            for name, metrics in results.rounds.items()
        }
        report["ratio_to_direct"] = {
            name: {metric: results.ratio(name, metric, "direct") for metric in metrics}
            for name, metrics in results.rounds.items()
        }
        report["ratio_to_nginx"] = {
            name: {metric: results.ratio(name, metric, "nginx") for metric in metrics}
            for name, metrics in results.rounds.items()
        }
        report["rounds"] = results.rounds
        report["scaling"] = results.once
    return report


def table(report: dict[str, object]) -> str:
    medians: dict[str, dict[str, float]] = report["medians"]  # type: ignore[assignment]
    to_nginx: dict[str, dict[str, float | None]] = report["ratio_to_nginx"]  # type: ignore[assignment]
    to_direct: dict[str, dict[str, float | None]] = report["ratio_to_direct"]  # type: ignore[assignment]
    scaling: dict[str, dict[str, object]] = report["scaling"]  # type: ignore[assignment]
    names = list(medians)
    metrics = list(dict.fromkeys(m for values in medians.values() for m in values))
    lines = ["| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for metric in metrics:
        cells = []
        for name in names:
            value = medians[name].get(metric)
            if value is None:
                cells.append("n/a")
                continue
            ratio_n = to_nginx.get(name, {}).get(metric)
            ratio_d = to_direct.get(name, {}).get(metric)
            extra = []
            if ratio_d is not None and name != "direct":
                extra.append(f"{ratio_d:.2f}x direct")
            if ratio_n is not None and name != "nginx":
                extra.append(f"{ratio_n:.2f}x nginx")
            cells.append(f"{value:,.3g}" + (f" ({', '.join(extra)})" if extra else ""))
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "| peak RSS of any relay process (KiB) | "
        + " | ".join(
            str(scaling.get(name, {}).get("peak_rss_kib_during_run", "n/a")) for name in names
        )
        + " |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.relay_bench")
    parser.add_argument("--smoke", action="store_true", help="a seconds-long run of every part")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each timed load")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    parser.add_argument(
        "--no-sessions", action="store_true", help="skip the sessions' start and idle memory"
    )
    parser.add_argument(
        "--other",
        type=Path,
        default=None,
        metavar="SRC",
        help="also measure another checkout's sandbridge (its src directory), as 'other'",
    )
    parser.add_argument(
        "--workloads",
        nargs="+",
        default=list(WORKLOADS),
        choices=WORKLOADS,
        help="measure only these (scaling: the series after the rounds, and the sessions)",
    )
    args = parser.parse_args(argv)
    args.concurrency = [1, 16, 64, 256]
    args.websockets = [0, 500, 1000, 2000]
    args.apps = [1, 16, 64, 256]
    args.ttfb_samples, args.sse_events = 30, 100
    # starts of each kind, idle sessions, the egress session's downloads and their size
    args.sessions = (10, 8, (EGRESS_DOWNLOADS, EGRESS_BYTES))
    args.requests = None  # wrk's loads run their whole --seconds
    if args.smoke:
        # wrk's loads stop after a few requests (workloads.SMOKE_REQUESTS), within wrk's
        # shortest second; the WebSocket echoes after as many, or at a quarter second.
        args.rounds, args.seconds, args.requests = 1, 0.25, workloads.SMOKE_REQUESTS
        # One point of the concurrency and registered-apps series (c=1 and c=64 are in the
        # round already); the WebSocket one keeps two: the memory per socket is their difference.
        args.concurrency, args.websockets, args.apps = [8], [0, 20], [4]
        args.ttfb_samples, args.sse_events = 3, 5
        # one of each: a start, a session, a download
        args.sessions = (1, 1, (1, workloads.SMOKE_BIG * MIB))
    if args.no_sessions:
        args.sessions = ()
    report = run(args)
    print("\n".join(f"{key}: {value}" for key, value in report["versions"].items()))  # type: ignore[attr-defined]
    print(table(report))
    sessions = report["scaling"].get("sessions")  # type: ignore[attr-defined]
    if sessions is not None:
        print(sessions_table(sessions))
    remote = report["scaling"].get("remote")  # type: ignore[attr-defined]
    if remote is not None:
        print(remote_table(remote))
    print(json.dumps(report["scaling"], indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
