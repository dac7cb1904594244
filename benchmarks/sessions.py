"""What a session costs (issue 15, "cheap sessions"): its start and its memory.

- ``start_ms``: the wall time of ``sandbridge run --net none -- true``, served by a
  running daemon, standalone (``--no-daemon``), and ``bwrap ... true`` alone as the
  floor (median of ``samples``, the three interleaved).
- ``idle``: ``count`` sessions started and left idle (``sleep``), served by the daemon:
  the daemon's RSS before and after (per session), each ``run`` client (it holds the
  sandbox while the daemon serves it), and each sandbox's shim (the sandbox's own
  sandbridge process); standalone, each session's host process and shim.

The daemon runs with a private ``XDG_RUNTIME_DIR``, so it serves only these sessions.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.paths import SANDBRIDGE, _descendants, _is_shim
from benchmarks.workloads import rss_kib

BWRAP = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all"]
START_TIMEOUT = 60.0


def _env(runtime: Path) -> dict[str, str]:
    return {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}


def _wall_ms(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=START_TIMEOUT)
    return (time.perf_counter() - started) * 1e3


def _sessions(env: dict[str, str]) -> int:
    out = subprocess.run(
        [*SANDBRIDGE, "ls", "--json"], env=env, capture_output=True, text=True, check=True
    ).stdout
    return len(json.loads(out))


def _wait_for_sessions(env: dict[str, str], count: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while _sessions(env) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count} sessions did not start within {START_TIMEOUT:g} s")
        time.sleep(0.1)


def _shims(pid: int) -> list[int]:
    return [child for child in _descendants(pid) if _is_shim(child)]


def _wait_for_shims(runs: list[subprocess.Popen[bytes]]) -> list[int]:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        shims = [_shims(run.pid) for run in runs]
        if all(shims):
            return [found[0] for found in shims]
        if time.monotonic() > deadline:
            raise RuntimeError("a session's shim did not start")
        time.sleep(0.1)


def _run(work: Path, *options: str) -> list[str]:
    """``sandbridge run`` with ``options`` and no network, in ``work``."""
    return [*SANDBRIDGE, "run", *options, "--net", "none", "--workdir", str(work), "--"]


def _start_idle(
    work: Path, env: dict[str, str], count: int, *options: str
) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen(
            [*_run(work, *options), "sleep", "3600"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def measure_sessions(samples: int, count: int) -> dict[str, object]:
    """The figures above; ``samples`` starts of each kind, ``count`` idle sessions."""
    with tempfile.TemporaryDirectory(prefix="sandbridge-sessions-") as tmp:
        runtime = Path(tmp) / "xdg"
        runtime.mkdir(mode=0o700)
        work = Path(tmp) / "work"
        work.mkdir()
        env = _env(runtime)
        daemon = subprocess.Popen(
            [*SANDBRIDGE, "daemon"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            assert daemon.stderr is not None
            if b"sandbridge: daemon " not in daemon.stderr.readline():
                raise RuntimeError("the daemon did not start")
            starts: dict[str, list[float]] = {"daemon": [], "standalone": [], "bwrap": []}
            for _ in range(samples):
                starts["daemon"].append(_wall_ms([*_run(work), "true"], env))
                starts["standalone"].append(_wall_ms([*_run(work, "--no-daemon"), "true"], env))
                starts["bwrap"].append(_wall_ms([*BWRAP, "true"], env))
            before = rss_kib(daemon.pid)
            served = _start_idle(work, env, count)
            try:
                _wait_for_sessions(env, count)
                shims = _wait_for_shims(served)
                after = rss_kib(daemon.pid)
                served_shims = [rss_kib(pid) for pid in shims]
                clients = [rss_kib(run.pid) for run in served]
            finally:
                _stop(served)
        finally:
            daemon.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.wait(timeout=30)
            if daemon.poll() is None:
                daemon.kill()
        alone = _start_idle(work, env, count, "--no-daemon")
        try:
            shims = _wait_for_shims(alone)
            hosts = [rss_kib(run.pid) for run in alone]
            alone_shims = [rss_kib(pid) for pid in shims]
        finally:
            _stop(alone)
    return {
        "start_ms": {kind: round(statistics.median(times), 1) for kind, times in starts.items()},
        "idle_sessions": count,
        "daemon_rss_kib_per_session": round((after - before) / count),
        "daemon_rss_kib": {"before": before, "after": after},
        "served_shim_rss_kib_max": max(served_shims),
        "served_client_rss_kib_median": round(statistics.median(clients)),
        "standalone_host_rss_kib_median": round(statistics.median(hosts)),
        "standalone_shim_rss_kib_max": max(alone_shims),
    }


def table(figures: dict[str, object]) -> str:
    starts: dict[str, float] = figures["start_ms"]  # type: ignore[assignment]
    floor = starts["bwrap"]
    rows = [
        ("served by the daemon", "daemon", "daemon_rss_kib_per_session", "the daemon's growth",
         "served_shim_rss_kib_max"),
        ("(its `run` client)", "daemon", "served_client_rss_kib_median", "the client process",
         "served_shim_rss_kib_max"),
        ("standalone", "standalone", "standalone_host_rss_kib_median", "its own host process",
         "standalone_shim_rss_kib_max"),
    ]  # fmt: skip
    lines = [
        "| session | `run --net none -- true` (ms) | host memory per idle session (KiB) "
        "| shim (KiB) |",
        "|---|---|---|---|",
    ]
    for label, kind, host, what, shim in rows:
        lines.append(
            f"| {label} | {starts[kind]} (+{starts[kind] - floor:.1f} over bwrap) "
            f"| {figures[host]} ({what}) | {figures[shim]} |"
        )
    lines.append(f"| bwrap alone | {floor} | n/a | n/a |")
    return "\n".join(lines)
