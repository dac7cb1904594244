"""What a session costs (issue 15, "cheap sessions"): its start and its memory.

- ``start_ms``: the wall time of ``sandbridge run --net none -- true``, served by a
  running daemon, standalone (``--no-daemon``), and ``bwrap ... true`` alone as the
  floor (median of ``samples``, the three interleaved); ``over_bwrap_ms``: the median of
  each sample's difference to the bwrap run beside it (paired, so that the machine's
  drift between samples cancels).
- ``idle``: ``count`` sessions started and left idle (``sleep``), served by the daemon:
  the daemon's RSS before and after (per session), each ``run`` client (it holds the
  sandbox while the daemon serves it), and each sandbox's shim (the sandbox's own
  sandbridge process, the entry) idle; after it refused a malformed first line; after
  real HTTP requests to the session's app through the relay (each a new connection the
  shim hands off: what users do); and after a v1 request, which loads the event loop
  (the entry serves refusals and handoffs without it); standalone, each session's host
  process and shim. A daemon-served session also has its child of the daemon's run
  builder (docs/daemon.md), which waits for the session's end to remove its dirs: its
  private memory (``smaps_rollup``: what it does not share with the builder it was
  forked from) and its RSS; the builder itself is one process per daemon.
- ``egress``: one standalone ``--net allow`` session (the default network mode) whose
  command downloads ``EGRESS_DOWNLOADS`` times ``EGRESS_BYTES`` from a host service
  through the gate (the entry's gate listener bridges each connection to the host's
  egress gate): the shim's RSS and peak (``VmHWM``) after that, whether the event
  loop was loaded (its libraries in ``/proc/PID/maps``), and the downloads' median
  rate (curl's ``time_total``; the host's gate and proxy are on the path too).
- ``publish``: one standalone ``--publish auto`` session whose command starts the static
  app after the session started: the shim's RSS and peak once the host printed the
  app's URL (auto-publish found it and registered it), and whether the event loop was
  loaded.

The package's bytecode is compiled first: an installed package has it, while a checkout
run with ``PYTHONDONTWRITEBYTECODE`` set would compile every module in every process.
The daemon runs with a private ``XDG_RUNTIME_DIR``, so it serves only these sessions.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import http.server
import json
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import sandbridge
from benchmarks.paths import (
    PYTHON,
    SANDBRIDGE,
    _descendants,
    _is_shim,
    address_of,
    read_line,
)
from benchmarks.proc import children
from benchmarks.workloads import rss_kib

BWRAP = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all"]
START_TIMEOUT = 60.0
# The idle sessions' app: a static file server, registered with the relay.
APP_PORT = 4173
SERVED_APP = (
    f"{PYTHON} -m http.server {APP_PORT} --bind 127.0.0.1 --directory / >/dev/null 2>&1 & "
    f"ags-webview-url {APP_PORT} && exec sleep 3600"
)
# Requests through the relay per session (each on a new connection: one handoff each).
APP_REQUESTS = 20
# Egress traffic in the allow-mode session: downloads of a file from a host service,
# each a new connection through the gate (large enough that a buffer growing with the
# data would show in the shim's peak memory).
EGRESS_DOWNLOADS = 4
EGRESS_BYTES = 50 * 1024 * 1024
GATE_ADDRESS = "100.64.0.1"
# Libraries the event loop brings into the shim: asyncio's C part, OpenSSL's, uvloop.
EVENT_LOOP_LIBRARIES = ("_asyncio", "_ssl", "uvloop")


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
        for run in runs:
            if run.poll() is not None:  # ended before its shim showed: say why
                assert run.stderr is not None
                why = run.stderr.read().decode(errors="replace").strip()
                raise RuntimeError(f"a session ended with status {run.returncode}: {why}")
        if time.monotonic() > deadline:
            raise RuntimeError("a session's shim did not start")
        time.sleep(0.1)


def compile_package(package: Path | None = None) -> None:
    """Write the bytecode of every module of ``package`` (this tree's sandbridge if none),
    as installing the package does: where ``PYTHONDONTWRITEBYTECODE`` is set, every start
    measured would otherwise compile each module anew."""
    package = package or Path(sandbridge.__file__).parent
    subprocess.run([PYTHON, "-m", "compileall", "-q", str(package)], check=True)


def _serve_once(runtime: Path, line: bytes) -> None:
    """Make each session's shim serve one connection with first line ``line``, read to
    the end (so that it has served): ``{}`` is refused, a v1 request answered."""
    for path in runtime.glob("ags-webview-relay-*/upstream.sock"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(START_TIMEOUT)
            sock.connect(str(path))
            sock.sendall(line)
            while sock.recv(4096):
                pass


def _v1_request() -> bytes:
    message = {"type": "http_request", "port": APP_PORT, "method": "GET", "path": "/"}
    return json.dumps(message).encode() + b"\n"


def _request_app(urls: list[str]) -> None:
    """APP_REQUESTS real requests to each session's app, through its host listener."""
    for url in urls:
        address, port, _ = address_of(url)
        host = urllib.parse.urlsplit(url).netloc
        for _ in range(APP_REQUESTS):
            conn = http.client.HTTPConnection(address, port, timeout=START_TIMEOUT)
            try:
                conn.request("GET", "/", headers={"Host": host})
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    raise RuntimeError(f"{url} answered {response.status}")
            finally:
                conn.close()


def _run(work: Path, *options: str) -> list[str]:
    """``sandbridge run`` with ``options`` and no network, in ``work``."""
    return [*SANDBRIDGE, "run", *options, "--net", "none", "--workdir", str(work), "--"]


def _start_idle(
    work: Path, env: dict[str, str], count: int, *options: str, app: bool = False
) -> list[subprocess.Popen[bytes]]:
    """``count`` sessions running ``sleep``, or with ``app`` the static app (its URL is
    the first line of their output)."""
    command = ["sh", "-c", SERVED_APP] if app else ["sleep", "3600"]
    return [
        subprocess.Popen(
            [*_run(work, *options), *command],
            env=env,
            stdout=subprocess.PIPE if app else subprocess.DEVNULL,
            stderr=subprocess.PIPE,  # a few lines at the start, read if it fails
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
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


def _private_kib(pid: int) -> int:
    """Memory of ``pid`` that no other process shares (clean and dirty private pages)."""
    with contextlib.suppress(OSError):
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
        return sum(int(line.split()[1]) for line in rollup if line.startswith("Private_"))
    return 0


def _builder_children(daemon: int) -> tuple[int | None, list[int]]:
    """The daemon's run builder and the children it forked (one per thin client)."""
    for child in children(daemon):
        if b"sandbridge.cli.run_builder" in Path(f"/proc/{child}/cmdline").read_bytes():
            return child, children(child)
    return None, []


def _measure_served(
    work: Path, runtime: Path, env: dict[str, str], count: int, daemon: int
) -> dict[str, object]:
    """``count`` sessions with the app, served by ``daemon``: its growth, each client,
    each shim idle and as it serves more."""
    before = rss_kib(daemon)
    served = _start_idle(work, env, count, app=True)
    try:
        urls = [read_line(run, b"http://").decode().strip() for run in served]
        _wait_for_sessions(env, count)
        shims = _wait_for_shims(served)
        after = rss_kib(daemon)
        idle = [rss_kib(pid) for pid in shims]
        clients = [rss_kib(run.pid) for run in served]
        builder, forked = _builder_children(daemon)
        builder_children = [(_private_kib(pid), rss_kib(pid)) for pid in forked] or [(0, 0)]
        _serve_once(runtime, b"{}\n")
        refusing = [rss_kib(pid) for pid in shims]
        _request_app(urls)
        serving = [rss_kib(pid) for pid in shims]
        _serve_once(runtime, _v1_request())
        with_loop = [rss_kib(pid) for pid in shims]
    finally:
        _stop(served)
    return {
        "daemon_rss_kib_per_session": round((after - before) / count),
        "daemon_rss_kib": {"before": before, "after": after},
        "served_shim_rss_kib_max": max(idle),
        "served_shim_refusing_rss_kib_max": max(refusing),
        "served_shim_serving_rss_kib_max": max(serving),
        "served_shim_event_loop_rss_kib_max": max(with_loop),
        "served_client_rss_kib_median": round(statistics.median(clients)),
        "builder_rss_kib": 0 if builder is None else rss_kib(builder),
        "served_builder_child_private_kib_median": round(
            statistics.median(private for private, _ in builder_children)
        ),
        "served_builder_child_rss_kib_median": round(
            statistics.median(rss for _, rss in builder_children)
        ),
    }


# The --publish auto session's command: the static app, started after the session, never
# registered by the command itself.
UNREGISTERED_APP = (
    f"{PYTHON} -m http.server {APP_PORT} --bind 127.0.0.1 --directory / >/dev/null 2>&1 & "
    "exec sleep 3600"
)


def _measure_publish(work: Path, env: dict[str, str]) -> dict[str, object]:
    """One ``--publish auto`` session: its shim's memory once its app is published."""
    argv = [*_run(work, "--no-daemon", "--publish", "auto"), "sh", "-c", UNREGISTERED_APP]
    session = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        (shim,) = _wait_for_shims([session])
        read_line(session, f"sandbridge: sandbox port {APP_PORT} ".encode(), "stderr")
        maps = Path(f"/proc/{shim}/maps").read_text()
        return {
            "publish_shim_rss_kib": rss_kib(shim),
            "publish_shim_peak_rss_kib": rss_kib(shim, "VmHWM"),
            "publish_shim_event_loop": any(name in maps for name in EVENT_LOOP_LIBRARIES),
        }
    finally:
        _stop([session])


def _measure_egress(tmp: Path, env: dict[str, str], downloads: int, size: int) -> dict[str, object]:
    """One ``--net allow`` session downloading ``downloads`` times ``size`` bytes from a
    host service through the gate: its shim's memory after the downloads, and whether it
    loaded the event loop."""
    files = tmp / "egress-files"
    files.mkdir()
    (files / "big.bin").write_bytes(os.urandom(size))
    handler = functools.partial(_QuietFiles, directory=str(files))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    url = f"http://{GATE_ADDRESS}:{port}/big.bin"
    download = f"curl -sSf -o /dev/null -w '%{{time_total}}' {url}"
    script = (
        f'times=""; for i in $(seq {downloads}); do t=$({download}) || exit 1; '
        'times="$times $t"; done; echo "EGRESS DONE$times"; exec sleep 3600'
    )
    work = tmp / "egress-work"
    work.mkdir()
    argv = [*SANDBRIDGE, "run", "--no-daemon", "--net", "allow", "--allow", f"gate:{port}"]
    session = subprocess.Popen(
        [*argv, "--workdir", str(work), "--", "sh", "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        (shim,) = _wait_for_shims([session])
        times = [float(t) for t in read_line(session, b"EGRESS DONE").split()[2:]]
        maps = Path(f"/proc/{shim}/maps").read_text()
        figures: dict[str, object] = {
            "egress_bytes": downloads * size,
            "egress_mib_s_median": round(size / 2**20 / statistics.median(times)),
            "egress_shim_rss_kib": rss_kib(shim),
            "egress_shim_peak_rss_kib": rss_kib(shim, "VmHWM"),
            "egress_shim_event_loop": any(name in maps for name in EVENT_LOOP_LIBRARIES),
        }
    finally:
        _stop([session])
        server.shutdown()
        server.server_close()
    return figures


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def measure_sessions(
    samples: int, count: int, egress: tuple[int, int] = (EGRESS_DOWNLOADS, EGRESS_BYTES)
) -> dict[str, object]:
    """The figures above; ``samples`` starts of each kind, ``count`` idle sessions,
    ``egress`` the egress session's downloads and their size."""
    with tempfile.TemporaryDirectory(prefix="sandbridge-sessions-") as tmp:
        runtime = Path(tmp) / "xdg"
        runtime.mkdir(mode=0o700)
        work = Path(tmp) / "work"
        work.mkdir()
        env = _env(runtime)
        compile_package()
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
            served = _measure_served(work, runtime, env, count, daemon.pid)
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
        egress_figures = _measure_egress(Path(tmp), env, *egress)
        publish = _measure_publish(work, env)
    over = {
        kind: round(
            statistics.median(t - b for t, b in zip(starts[kind], starts["bwrap"], strict=True)), 1
        )
        for kind in ("daemon", "standalone")
    }
    return {
        "start_ms": {kind: round(statistics.median(times), 1) for kind, times in starts.items()},
        "over_bwrap_ms": over,
        "idle_sessions": count,
        **served,
        "standalone_host_rss_kib_median": round(statistics.median(hosts)),
        "standalone_shim_rss_kib_max": max(alone_shims),
        **egress_figures,
        **publish,
    }


def table(figures: dict[str, object]) -> str:
    starts: dict[str, float] = figures["start_ms"]  # type: ignore[assignment]
    over: dict[str, float] = figures["over_bwrap_ms"]  # type: ignore[assignment]
    rows = [
        ("served by the daemon", "daemon", "daemon_rss_kib_per_session", "the daemon's growth"),
        ("(its `run` client)", None, "served_client_rss_kib_median", "the client process"),
        (
            "(its builder child)",
            None,
            "served_builder_child_private_kib_median",
            f"private; {figures['served_builder_child_rss_kib_median']} RSS, the rest shared "
            f"with the daemon's builder, {figures['builder_rss_kib']} RSS",
        ),
        ("standalone", "standalone", "standalone_host_rss_kib_median", "its own host process"),
    ]
    lines = [
        "| session | `run --net none -- true` (ms) | over bwrap, paired (ms) "
        "| host memory per idle session (KiB) | shim idle (KiB) | shim after a refusal (KiB) "
        f"| shim after {APP_REQUESTS} app requests (KiB) | shim with the event loop (KiB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    shims = {
        "daemon": (
            figures["served_shim_rss_kib_max"],
            figures["served_shim_refusing_rss_kib_max"],
            figures["served_shim_serving_rss_kib_max"],
            figures["served_shim_event_loop_rss_kib_max"],
        ),
        "standalone": (figures["standalone_shim_rss_kib_max"], "n/a", "n/a", "n/a"),
    }
    for label, kind, host, what in rows:
        if kind is None:
            lines.append(f"| {label} | | | {figures[host]} ({what}) | | | | |")
            continue
        shim = " | ".join(str(value) for value in shims[kind])
        lines.append(
            f"| {label} | {starts[kind]} | +{over[kind]} | {figures[host]} ({what}) | {shim} |"
        )
    lines.append(f"| bwrap alone | {starts['bwrap']} | 0 | n/a | n/a | n/a | n/a | n/a |")
    lines.append("")
    lines.append(egress_table(figures))
    lines.append("")
    lines.append(publish_table(figures))
    return "\n".join(lines)


def egress_table(figures: dict[str, object]) -> str:
    """The ``--net allow`` session's shim after egress traffic, as a one-row table."""
    mib = int(figures["egress_bytes"]) // (1024 * 1024)  # type: ignore[call-overload]
    return "\n".join(
        [
            "| `--net allow` session | egress through the gate (MiB) | median rate (MiB/s) "
            "| shim RSS after (KiB) | shim peak RSS (KiB) | event loop loaded |",
            "|---|---|---|---|---|---|",
            f"| standalone | {mib} | {figures['egress_mib_s_median']} "
            f"| {figures['egress_shim_rss_kib']} "
            f"| {figures['egress_shim_peak_rss_kib']} "
            f"| {'yes' if figures['egress_shim_event_loop'] else 'no'} |",
        ]
    )


def publish_table(figures: dict[str, object]) -> str:
    """The ``--publish auto`` session's shim once its app is published, as a one-row table."""
    return "\n".join(
        [
            "| `--publish auto` session | shim RSS (KiB) | shim peak RSS (KiB) "
            "| event loop loaded |",
            "|---|---|---|---|",
            f"| standalone, its app published | {figures['publish_shim_rss_kib']} "
            f"| {figures['publish_shim_peak_rss_kib']} "
            f"| {'yes' if figures['publish_shim_event_loop'] else 'no'} |",
        ]
    )
