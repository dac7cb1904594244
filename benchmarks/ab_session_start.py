"""A session's start, this tree against another, side by side (issue 29's "session start").

``python -m benchmarks.ab_session_start OTHER/src [--samples N] [--projects N]``

Each tree gets its own daemon, with a private ``XDG_RUNTIME_DIR`` and ``HOME`` (so its own
state dir) that remembers ``--projects`` projects, each with a ``.sandbridge/``, where a
sandbox sees them (under ``/var/tmp``: not ``/tmp``, ``/run`` or home, which a sandbox
replaces). Each sample runs, for each tree in turn, ``sandbridge run --net none -- true``
and then the bare bwrap line ``benchmarks.sessions`` uses, so that each run has a bwrap run
beside it: ``over bwrap`` is the median of those paired differences, as in
``benchmarks.sessions``. Also each run's CPU time, every process's: the run's own (its
client, the sandbox, bwrap), its daemon's and its daemon's run builder's (with the
builder's child, which builds the run, read once that child has ended: it outlives its
client by the placeholders' removal). The trees alternate within each sample, so the
machine's drift falls on both alike.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.paths import SANDBRIDGE
from benchmarks.proc import children, cpu_seconds, stat_fields
from benchmarks.sessions import BWRAP, compile_package

REPO = Path(__file__).resolve().parent.parent
# Where remembered projects lie: seen through the sandbox's read-only root.
PROJECTS_PARENT = "/var/tmp"
WARM_UP_RUNS = 2
# How long a run's builder child may take to end after its client (a placeholders'
# removal on a loaded machine takes well under a second).
CHILDREN_TIMEOUT = 10.0


@dataclass
class Tree:
    """One tree under test: its daemon and what each sample measured."""

    label: str
    env: dict[str, str]
    work: Path
    daemon: subprocess.Popen[bytes] | None = None
    over_ms: list[float] = field(default_factory=list)
    run_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)


def _cpu_ms(pid: int) -> float:
    """``pid``'s CPU time and its waited-for children's."""
    return cpu_seconds(pid) * 1e3


def _session_of(pid: int) -> int:
    return int(stat_fields(pid)[3])


def _building(pid: int) -> list[int]:
    """``pid``'s children that build a run: each one has a session of its own (a child
    forked ahead, waiting for its client, has not)."""
    found = []
    for child in children(pid):
        with contextlib.suppress(OSError):  # ended meanwhile
            if _session_of(child) != _session_of(pid):
                found.append(child)
    return found


def _wait_for_no_builds(pids: list[int]) -> None:
    """Until none of ``pids`` has a child building a run (each one ended and reaped),
    10 s at most."""
    deadline = time.monotonic() + CHILDREN_TIMEOUT
    while any(_building(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.001)


def _prepare(top: Path, projects_dir: Path, label: str, src: str, projects: int) -> Tree:
    home = top / label / "home"
    state = home / ".local" / "state" / "sandbridge"
    state.mkdir(parents=True, mode=0o700)
    runtime = top / label / "xdg"
    runtime.mkdir(mode=0o700)
    work = top / label / "work"
    work.mkdir()
    roots = []
    for index in range(projects):
        root = projects_dir / label / f"project-{index:03d}"
        (root / ".sandbridge").mkdir(parents=True)
        roots.append(f"{root}\n")
    listing = state / "projects"
    listing.write_text("".join(roots))
    listing.chmod(0o600)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "HOME": str(home), "PYTHONPATH": src}
    env.pop("XDG_STATE_HOME", None)
    return Tree(label, env, work)


def _start_daemon(tree: Tree) -> None:
    tree.daemon = subprocess.Popen(
        [*SANDBRIDGE, "daemon"],
        env=tree.env,
        cwd=tree.work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert tree.daemon.stderr is not None
    if b"sandbridge: daemon " not in tree.daemon.stderr.readline():
        raise RuntimeError(f"{tree.label}: the daemon did not start")


def _sample(tree: Tree) -> None:
    assert tree.daemon is not None
    argv = [*SANDBRIDGE, "run", "--net", "none", "--workdir", str(tree.work), "--", "true"]
    hosts = [tree.daemon.pid, *children(tree.daemon.pid)]
    host_before = sum(_cpu_ms(pid) for pid in hosts)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, env=tree.env, check=True, capture_output=True)
    ran = time.perf_counter()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([*BWRAP, "true"], env=tree.env, check=True, capture_output=True)
    bare = time.perf_counter() - ran
    # The builder's child may still be at work once its client has exited (it removes
    # the placeholders then): its CPU counts once it has ended and been reaped.
    _wait_for_no_builds(hosts[1:])
    host_after = sum(_cpu_ms(pid) for pid in hosts)
    own = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    tree.run_ms.append((ran - started) * 1e3)
    tree.over_ms.append((ran - started - bare) * 1e3)
    tree.cpu_ms.append(own * 1e3 + host_after - host_before)


@contextlib.contextmanager
def _daemons(trees: list[Tree]) -> Iterator[None]:
    try:
        for tree in trees:
            _start_daemon(tree)
        yield
    finally:
        for tree in trees:
            if tree.daemon is not None:
                tree.daemon.terminate()
                tree.daemon.wait(timeout=30)


def measure(others: dict[str, str], samples: int, projects: int) -> list[Tree]:
    """This tree (``this``) and ``others`` (label: its ``src``), ``samples`` each."""
    sources = {"this": str(REPO / "src"), **others}
    for src in sources.values():
        compile_package(Path(src) / "sandbridge")
    with (
        tempfile.TemporaryDirectory(prefix="sandbridge-ab-start-") as tmp,
        tempfile.TemporaryDirectory(prefix="sandbridge-ab-projects-", dir=PROJECTS_PARENT) as pro,
    ):
        trees = [
            _prepare(Path(tmp), Path(pro), label, src, projects) for label, src in sources.items()
        ]
        with _daemons(trees):
            for _ in range(WARM_UP_RUNS):
                for tree in trees:
                    _sample(tree)
            for tree in trees:
                tree.over_ms.clear()
                tree.run_ms.clear()
                tree.cpu_ms.clear()
            for _ in range(samples):
                for tree in trees:
                    _sample(tree)
    return trees


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", nargs="*", help="another tree's src directory (LABEL=SRC)")
    parser.add_argument("--samples", type=int, default=41)
    parser.add_argument("--projects", type=int, default=0, help="remembered projects")
    args = parser.parse_args()
    others = dict(
        item.split("=", 1) if "=" in item else (f"other{index}", item)
        for index, item in enumerate(args.other)
    )
    trees = measure(others, args.samples, args.projects)
    load = " ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"{args.samples} samples, {args.projects} remembered projects, load after: {load}")
    print("medians; over bwrap: of each run's difference to the bwrap run beside it")
    for tree in trees:
        run, over, cpu = (statistics.median(v) for v in (tree.run_ms, tree.over_ms, tree.cpu_ms))
        print(f"{tree.label}: run {run:.1f} ms, over bwrap +{over:.1f} ms, CPU {cpu:.1f} ms")


if __name__ == "__main__":
    main()
