"""A far app through ``sandbridge connect`` against the same app through ``ssh -L`` (issue 17).

    python -m benchmarks.remote_bench [--rounds 5] [--seconds 5] [--json results.json]
    python -m benchmarks.remote_bench --smoke      # seconds-long run that checks it works
    python -m benchmarks.remote_bench --before /tmp/main/src   # also another checkout's connect

Everything runs on this machine, over loopback, as the user running the benchmark:

- the "far machine": a real throwaway OpenSSH server (``tests/remote/sshd.py``: its own
  host and user keys, config and known_hosts in a temporary dir) and a far session
  (``sandbridge host`` and its shim in their own ``XDG_RUNTIME_DIR``) with one app,
  nginx with ``sendfile`` serving a 1 KiB and a 100 MiB file;
- the paths to that app, all through the same sshd:

  ``connect``      ``sandbridge connect far`` (the built-in SSH transport, asyncssh) running
                   ``serve-stdio`` there: laptop listener -> link -> upstream.sock -> app;
  ``ssh-L``        ``ssh -N -L`` to the far session's own host listener (OpenSSH's
                   client): what a user would pick instead;
  ``connect-via``  ``sandbridge connect --via 'ssh far sandbridge serve-stdio'``;
  ``far-direct``   the far session's host listener itself, no SSH: the upper limit;
  ``connect-before`` (``--before SRC``) ``connect`` as above, both ends run from another
                   checkout's ``src`` (``git worktree add /tmp/main main``): before/after
                   measured in the same rounds.

Rounds interleave the paths in a rotating order; each figure is the median over rounds,
and ``connect`` and ``connect-via`` are also given as the median over rounds of their
ratio to ``ssh-L`` measured in the same round (for p99 and CPU, lower is better).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import workloads
from benchmarks.paths import (
    PYTHON,
    SANDBRIDGE,
    _descendants,
    _spawn,
    drain,
    free_port,
    host_apps,
    read_line,
    start_at_once,
    wait_until_serving,
)
from tests.remote.sshd import Sshd, start_sshd

MIB = 1024 * 1024
PATH_NAMES = ("connect", "ssh-L", "connect-via", "far-direct")
# With --before SRC: `connect` of another checkout's src, both ends, for a paired before/after.
BEFORE = "connect-before"
METRICS = ("c64_rps", "c64_p99_ms", "get_100m_mbps", "cpu_us_per_req", "cpu_ms_per_get")
# The alias of the throwaway sshd in its client config.
ALIAS = "far"


@dataclass
class RemotePath:
    """One way to the far app: the URL to dial and the Host to send."""

    name: str
    url: str
    host_field: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def _write_files(www: Path, big: int) -> None:
    www.mkdir(exist_ok=True)
    (www / "1k").write_bytes(os.urandom(1024))
    block = os.urandom(MIB)
    with (www / "100m").open("wb") as out:
        for _ in range(big // MIB):
            out.write(block)


@contextlib.contextmanager
def far_session(work: Path, app_port: int) -> Iterator[tuple[Path, str]]:
    """A far session in its own XDG_RUNTIME_DIR with the app registered: that dir, and
    the app's URL on the far host listener."""
    xdg = work / "far-xdg"
    xdg.mkdir(mode=0o700)
    runtime = work / "far-rt"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(xdg)}
    host = _spawn(
        [*SANDBRIDGE, "host", "--runtime-dir", str(runtime), "--max-connections-per-app", "2500"],
        stderr=subprocess.PIPE,
        env=env,
    )
    processes = [host]
    try:
        read_line(host, b"serving registrations", "stderr", contains=True)
        drain(host)
        shim = _spawn(
            [*SANDBRIDGE, "shim", "--socket", str(runtime / "upstream.sock")],
            stderr=subprocess.PIPE,
            env=env,
        )
        processes.insert(0, shim)
        read_line(shim, b"shim listening", "stderr", contains=True)
        drain(shim)
        url = subprocess.run(
            [PYTHON, "-m", "sandbridge.relay.inside.url_helper", str(app_port)],
            env={**env, "AGS_WEBVIEW_RELAY_SOCKET": str(runtime / "relay.sock")},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        wait_until_serving(url + "1k")
        yield xdg, url.rstrip("/")
    finally:
        RemotePath("far", "", "", processes).stop()


def _env_of(source: Path | None) -> list[str]:
    return [] if source is None else [f"PYTHONPATH={source}"]


def serve_stdio_command(xdg: Path, source: Path | None = None) -> str:
    """What the far side runs: ``serve-stdio`` in the far session's dir, of this checkout
    or of the ``src`` dir ``source`` (another checkout, for a before/after pair)."""
    return shlex.join(
        ["env", f"XDG_RUNTIME_DIR={xdg}", *_env_of(source), *SANDBRIDGE, "serve-stdio"]
    )


def _netloc(url: str) -> str:
    return url.split("//", 1)[1].split("/", 1)[0]


def _connect(name: str, work: Path, argv: list[str], source: Path | None = None) -> RemotePath:
    """``sandbridge connect`` (of ``source``, else this checkout) in a laptop
    XDG_RUNTIME_DIR of its own, once it serves the app."""
    xdg = work / f"laptop-{name}"
    xdg.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(xdg)}
    if source is not None:
        env["PYTHONPATH"] = str(source)
    process = _spawn(
        [*SANDBRIDGE, "connect", *argv, "--name", "far"], stderr=subprocess.PIPE, env=env
    )
    try:
        line = read_line(process, b"sandbridge: far: ", "stderr", contains=False)
        while b" port " not in line or b" -> " not in line:
            line = read_line(process, b"sandbridge: far: ", "stderr")
        drain(process)
        url = line.decode().rsplit(" ", 1)[1].strip().rstrip("/")
        host = _netloc(url)
        dialled = f"http://127.0.0.1:{host.rsplit(':', 1)[1]}"
        wait_until_serving(dialled + "/1k")
        return RemotePath(name, dialled, host, [process])
    except BaseException:
        RemotePath(name, "", "", [process]).stop()
        raise


def _tunnel(config: str, far_host: str) -> RemotePath:
    """``ssh -L`` from a free local port to the far app's port, once it serves the app."""
    local = free_port()
    tunnel = _spawn(
        ["ssh", "-F", config, "-N", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes",
         "-L", f"127.0.0.1:{local}:127.0.0.1:{far_host.rsplit(':', 1)[1]}", ALIAS],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    path = RemotePath("ssh-L", f"http://127.0.0.1:{local}", far_host, [tunnel])
    try:
        wait_until_serving(path.url + "/1k")
    except BaseException:
        path.stop()
        raise
    return path


def start_paths(
    work: Path, sshd: Sshd, far_xdg: Path, far_url: str, before: Path | None = None
) -> dict[str, RemotePath]:
    """Every path, started at once (each SSH login takes its time; none waits for
    another's)."""
    far_host = _netloc(far_url)
    config = str(sshd.config_path)
    via = shlex.join(["ssh", "-F", config, "-o", "BatchMode=yes", ALIAS])
    starts: dict[str, Callable[[], RemotePath]] = {
        "connect": functools.partial(
            _connect, "connect", work,
            [ALIAS, "-F", config, "--remote-command", serve_stdio_command(far_xdg)],
        ),
        "ssh-L": functools.partial(_tunnel, config, far_host),
        "connect-via": functools.partial(
            _connect, "connect-via", work, ["--via", f"{via} {serve_stdio_command(far_xdg)}"]
        ),
    }  # fmt: skip
    if before is not None:
        command = serve_stdio_command(far_xdg, before)
        starts[BEFORE] = functools.partial(
            _connect, BEFORE, work, [ALIAS, "-F", config, "--remote-command", command], before
        )
    started = start_at_once(starts)
    paths = {name: started[name] for name in ("connect", "ssh-L", "connect-via")}
    paths["far-direct"] = RemotePath(
        "far-direct", f"http://127.0.0.1:{far_host.rsplit(':', 1)[1]}", far_host
    )
    if before is not None:
        paths[BEFORE] = started[BEFORE]
    return paths


def measure_round(
    path: RemotePath,
    seconds: float,
    rounds: dict[str, dict[str, list[float]]],
    requests: int | None = None,
) -> None:
    """One round of ``path``. The CPU figures count every process the benchmark started
    (nginx, the far session, sshd and its sessions, serve-stdio, connect, ssh): the
    other paths sit idle meanwhile, so they are this path's cost whatever else loads the
    machine, where the rates also measure the contention. ``requests``: a smoke run's cap
    of the wrk load (:func:`workloads.wrk`)."""
    got = rounds.setdefault(path.name, {})
    ours = _descendants(os.getpid())
    before = workloads.cpu_seconds(ours)
    c64 = workloads.wrk(
        path.url + "/1k", 64, seconds, host_field=path.host_field, requests=requests
    )
    middle = workloads.cpu_seconds(ours)
    mbps = workloads.bulk_get(path.url + "/100m", host_field=path.host_field)
    after = workloads.cpu_seconds(ours)
    got.setdefault("c64_rps", []).append(c64["rps"])
    got.setdefault("c64_p99_ms", []).append(c64["p99_ms"])
    got.setdefault("get_100m_mbps", []).append(mbps)
    got.setdefault("cpu_us_per_req", []).append((middle - before) / c64["requests"] * 1e6)
    got.setdefault("cpu_ms_per_get", []).append((after - middle) * 1e3)


def _ratio(rounds: dict[str, dict[str, list[float]]], name: str, metric: str) -> float | None:
    mine, theirs = rounds[name][metric], rounds["ssh-L"][metric]
    ratios = [a / b for a, b in zip(mine, theirs, strict=True) if b]
    return statistics.median(ratios) if ratios else None


def measure_remote(
    rounds: int, seconds: float, smoke: bool = False, before: Path | None = None
) -> dict[str, object]:
    """Every path, ``rounds`` interleaved rounds of ``seconds``-long loads; the figures."""
    big = (workloads.SMOKE_BIG if smoke else 100) * MIB
    requests = workloads.SMOKE_REQUESTS if smoke else None  # (workloads.wrk says why)
    with (
        tempfile.TemporaryDirectory(prefix="sandbridge-remote-bench-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        work = Path(tmp)
        # nginx's workers run as nobody when the benchmark runs as root: they must read www.
        os.chmod(work, 0o755)  # noqa: S103
        _write_files(work / "www", big)
        app_port, _ = stack.enter_context(host_apps(work))
        far_xdg, far_url = stack.enter_context(far_session(work, app_port))
        sshd = start_sshd(work / "sshd")
        stack.callback(sshd.stop)
        drain(sshd.process.popen)
        sshd.trust_host_key()
        sshd.write_client_config(ALIAS)
        paths = start_paths(work, sshd, far_xdg, far_url, before)
        for path in paths.values():
            stack.callback(path.stop)
        if not smoke:  # a smoke run claims no speed: nothing to warm up for
            for path in paths.values():
                workloads.wrk(path.url + "/1k", 16, 1, host_field=path.host_field)
        figures: dict[str, dict[str, list[float]]] = {}
        names = list(paths)
        for index in range(rounds):
            order = names[index % len(names) :] + names[: index % len(names)]
            for name in order:
                print(f"remote round {index + 1}/{rounds}: {name}", file=sys.stderr, flush=True)
                measure_round(paths[name], seconds, figures, requests)
    return {
        "settings": {"rounds": rounds, "seconds": seconds, "get_bytes": big},
        "medians": {
            name: {metric: statistics.median(values) for metric, values in got.items()}
            for name, got in figures.items()
        },
        "ratio_to_ssh_L": {
            name: {metric: _ratio(figures, name, metric) for metric in METRICS}
            for name in ("connect", "connect-via", BEFORE)
            if name in figures
        },
        "rounds": figures,
    }


def table(report: dict[str, object]) -> str:
    medians: dict[str, dict[str, float]] = report["medians"]  # type: ignore[assignment]
    ratios: dict[str, dict[str, float | None]] = report["ratio_to_ssh_L"]  # type: ignore[assignment]
    lines = ["| far app through | " + " | ".join(METRICS) + " |", "|---|" + "---|" * len(METRICS)]
    for name in medians:
        cells = []
        for metric in METRICS:
            cell = f"{medians[name][metric]:,.3g}"
            ratio = ratios.get(name, {}).get(metric)
            if ratio is not None:
                cell += f" ({ratio:.2f}x ssh -L)"
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.remote_bench")
    parser.add_argument("--smoke", action="store_true", help="a seconds-long run of every part")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each wrk load")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument(
        "--before",
        type=Path,
        metavar="SRC",
        help=f"also measure {BEFORE}: connect and serve-stdio of this src dir (another checkout)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.seconds = 1, 1.0
    report = measure_remote(args.rounds, args.seconds, args.smoke, args.before)
    print(table(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
