"""No sandbox sees another session's runtime dir, state dir or sockets, nor the owner's key
dir, whatever its workdir, binds, ``XDG_RUNTIME_DIR`` and backend: each layout either is
refused before anything starts or runs with none of it in sight (docs/security.md)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbridge.places.registry import session_path
from sandbridge.protocol.contract import runtime_base
from sandbridge.sandbox import deny_list
from sandbridge.terminals import keys
from tests.conftest import ECHO_APP, PYTHON, REPO, SANDBRIDGE, Process, run_argv
from tests.support.command_in_process import sandbridge

PROBE = str(REPO / "tests" / "apps" / "host_paths_probe.py")


@dataclass
class Base:
    """A runtime base the sessions of a module share: a private XDG_RUNTIME_DIR, or, with
    it unset, ``/tmp`` itself. That ``/tmp`` is a private directory mounted there in a
    mount namespace of the sessions' own (:data:`PRIVATE_TMP`): the fallback is the same
    path, and no test writes the real ``/tmp/sandbridge-<uid>`` another session uses."""

    top: Path
    xdg: Path | None
    # Where the test's process finds what the sessions keep under ``seen``.
    host: Path
    wrap: tuple[str, ...]

    @property
    def seen(self) -> Path:
        """The runtime base as the sessions see it."""
        return self.xdg or Path("/tmp")

    def on_host(self, path: Path) -> Path:
        """``path`` as the sessions see it, where this process finds it."""
        if path.is_relative_to(self.seen):
            return self.host / path.relative_to(self.seen)
        return path


# Runs "$@" with /tmp replaced by $1 (after "$2"... are the /tmp entries to keep in
# sight, each bound at its own name): sessions see their /tmp, nothing else changes.
PRIVATE_TMP = """
set -e
top=$1; shift
while [ "$1" != -- ]; do mkdir -p "$top/$1"; mount --bind "/tmp/$1" "$top/$1"; shift; done
shift
mount --rbind "$top" /tmp
exec "$@"
"""


@pytest.fixture(scope="module", params=["xdg-set", "xdg-unset"])
def base(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Base]:
    top = tmp_path_factory.mktemp(str(request.param))
    if request.param == "xdg-set":
        xdg = top / "xdg"
        xdg.mkdir(mode=0o700)
        yield Base(top, xdg, xdg, ())
        return
    private = Path(tempfile.mkdtemp(prefix="sbtmp-", dir="/tmp"))
    private.chmod(0o1777)
    # What the sessions need under the real /tmp: this run's temporary root, the private
    # tree the suite points XDG_* at, the checkout and the Python, wherever they are.
    needed = (top, Path(os.environ["XDG_CACHE_HOME"]), REPO, Path(PYTHON))
    kept = sorted({p.relative_to("/tmp").parts[0] for p in needed if p.is_relative_to("/tmp")})
    wrap = ("unshare", "--mount", "--propagation", "private", "sh", "-c", PRIVATE_TMP, "sh")
    try:
        yield Base(top, None, private, (*wrap, str(private), *kept, "--"))
    finally:
        shutil.rmtree(private, ignore_errors=True)


@dataclass
class World:
    """A test's home and its module's runtime base; ``tmp`` holds the home and the
    work dir, and, beside the runtime base, is the only test dir left in the base's
    ``top`` while the test runs."""

    tmp: Path
    home: Path
    base: Base

    @property
    def xdg(self) -> Path | None:
        return self.base.xdg

    @property
    def key_dir(self) -> Path:
        return self.home / ".config" / "sandbridge"


@pytest.fixture
def world(base: Base, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    tmp = base.top / f"t-{secrets.token_hex(4)}"
    home = tmp / "home"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    if base.xdg is not None:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(base.xdg))
    else:
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    (tmp / "work").mkdir()
    yield World(tmp, home, base)
    shutil.rmtree(tmp, ignore_errors=True)


def _refused(backend: str, workdir: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """The run, in this process (tests/support/command_in_process.py: a run that is not
    refused fails the test there, before its sandbox)."""
    argv = run_argv(workdir, "true", options=("--backend", backend, *options))
    return sandbridge(*argv[len(SANDBRIDGE) :])


# Each: (workdir, options) from the world, and the path the error must name.
Layout = Callable[[World], tuple[Path, tuple[str, ...], Path]]
REFUSED: dict[str, Layout] = {
    "workdir-tmp": lambda w: (Path("/tmp"), (), Path("/tmp")),
    "workdir-root": lambda w: (Path("/"), (), Path("/")),
    "workdir-runtime-base": lambda w: (runtime_base(), (), runtime_base()),
    "bind-tmp": lambda w: (w.tmp / "work", ("--bind", "/tmp"), Path("/tmp")),
    "ro-bind-tmp-elsewhere": lambda w: (w.tmp / "work", ("--ro-bind", "/tmp:/mnt/t"), Path("/tmp")),
    "bind-runtime-base": lambda w: (
        w.tmp / "work",
        ("--bind", str(runtime_base())),
        runtime_base(),
    ),
    "ro-bind-runtime-base": lambda w: (
        w.tmp / "work",
        ("--ro-bind", str(runtime_base())),
        runtime_base(),
    ),
    "ro-bind-key-dir": lambda w: (w.tmp / "work", ("--ro-bind", str(w.key_dir)), w.key_dir),
    "ro-bind-host-proc": lambda w: (
        w.tmp / "work",
        ("--ro-bind", "/proc/self/fd:/fds"),
        Path("/proc"),
    ),
}


@pytest.mark.parametrize("layout", list(REFUSED))
def test_layout_that_would_show_sandbridge_paths_is_refused_before_anything_starts(
    backend: str, world: World, layout: str
) -> None:
    world.key_dir.mkdir(parents=True, mode=0o700)
    workdir, options, named = REFUSED[layout](world)
    base = runtime_base()
    before = sorted(base.glob("ags-webview-relay-*"))
    result = _refused(backend, workdir, *options)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("sandbridge: ") and str(named) in line, line
    assert "use a subdirectory" in line or "bind " in line, line
    # Nothing started: no runtime dir of its own appeared.
    assert sorted(base.glob("ags-webview-relay-*")) == before or world.xdg is None


def test_workdir_with_a_replaceable_link_to_the_key_dir_is_refused(
    backend: str, world: World
) -> None:
    real = world.tmp / "real-config"
    real.mkdir()
    (world.home / ".config").symlink_to(real)
    result = _refused(backend, world.home)
    assert result.returncode == 2
    assert f"{world.home / '.config'} is a symlink" in result.stderr


# Layouts that run: (workdir, options, host dirs the sandbox may write to its owner's
# key dir through, for the plant attempts), and whether the owner's key exists first.
Running = Callable[[World], tuple[Path, tuple[str, ...], Path | None]]
RUNNING: dict[str, tuple[Running, bool]] = {
    "workdir-under-tmp": (lambda w: (w.tmp / "work", (), None), True),
    # The workdir holds the runtime base (when set) and home: both masked.
    "workdir-above-runtime-base-and-home": (lambda w: (w.base.top, (), w.home), True),
    # The owner has no key yet: the sandbox must not be able to make one for them.
    "workdir-home-before-first-use": (lambda w: (w.home, (), w.home), False),
    "bind-config": (lambda w: (w.tmp / "work", ("--bind", str(w.home / ".config")), w.home), True),
    "ro-binds-elsewhere": (
        lambda w: (
            w.tmp / "work",
            # Destinations that exist on the read-only host root.
            ("--ro-bind", f"{w.home / '.config'}:/mnt", "--ro-bind", f"{w.tmp}:/srv"),
            None,
        ),
        True,
    ),
}


@dataclass
class Victim:
    """A running session and the host paths of everything it owns, as sessions see them."""

    process: Process
    paths: list[Path]


def _victim(backend: str, base: Base, workdir: Path, env: dict[str, str]) -> Victim:
    name = f"victim-{secrets.token_hex(4)}"
    process = Process(
        [
            *base.wrap,
            *run_argv(
                workdir,
                PYTHON,
                ECHO_APP,
                "--register",
                "4173",
                options=("--backend", backend, "--name", name),
            ),
        ],
        env=env,
    )
    process.wait_line("READY")
    runtime = base.seen / f"ags-webview-relay-{process.popen.pid}"
    state = session_path(name, base.on_host(base.seen / f"sandbridge-{os.getuid()}"))
    state = base.seen / state.relative_to(base.host)
    paths = [
        runtime,
        *(runtime / sock for sock in ("relay.sock", "upstream.sock", "egress.sock")),
        state.parent.parent,
        state,
        state / "control.sock",
    ]
    # Each is there on the host: a probe that does not find it inside proves something.
    missing = [path for path in paths if not base.on_host(path).exists()]
    assert not missing, missing
    return Victim(process, paths)


@pytest.fixture(scope="module")
def first_victims(base: Base) -> Iterator[dict[str, Victim]]:
    """Per backend, a session every test's prober finds running when its sandbox is built
    (it only has to be there: one per module and backend, in a home and work dir of its
    own, out of every prober's sight but for the runtime base)."""
    started: dict[str, Victim] = {}
    yield started
    for victim in started.values():
        victim.process.stop()


def _first_victim(
    backend: str, base: Base, started: dict[str, Victim], factory: pytest.TempPathFactory
) -> Victim:
    if backend not in started:
        top = factory.mktemp("victim")
        (top / "home").mkdir()
        (top / "work").mkdir()
        env = {**os.environ, "HOME": str(top / "home")}
        started[backend] = _victim(backend, base, top / "work", env)
    return started[backend]


def _views(path: Path, options: tuple[str, ...]) -> list[Path]:
    """``path`` and where each bind in ``options`` would show it inside."""
    views = [path]
    for flag, value in zip(options[::2], options[1::2], strict=True):
        assert flag in ("--bind", "--ro-bind")
        source, _, dest = value.partition(":")
        if path.is_relative_to(source):
            views.append(Path(dest or source) / path.relative_to(source))
    return views


@pytest.fixture
def victims() -> Iterator[list[Victim]]:
    """The sessions a test started itself (stopped at its end)."""
    started: list[Victim] = []
    yield started
    for victim in started:
        victim.process.stop()


PROTECTED = {Path(entry.path) for entry in (*deny_list.PROJECT_ENTRIES, *deny_list.HOME_ENTRIES)}


def _placeholders(home: Path, new: set[Path]) -> set[Path]:
    """Those of ``new`` (relative to ``home``) that are empty protected-path
    placeholders, with the directories made to hold them."""
    found: set[Path] = set()
    for path in new:
        full = home / path
        empty = (full.is_dir() and not any(full.iterdir())) or full.stat().st_size == 0
        entry = next((e for e in PROTECTED if path.parts[-len(e.parts) :] == e.parts), None)
        if empty and entry is not None:
            found.add(path)
            found |= {parent for parent in path.parents if parent in new}
    return found


@pytest.mark.parametrize("layout", list(RUNNING))
def test_sandbox_sees_no_other_session_nor_the_owner_key_dir(
    backend: str,
    world: World,
    layout: str,
    first_victims: dict[str, Victim],
    victims: list[Victim],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    make, owner_has_key = RUNNING[layout]
    # A session running before the prober's sandbox is built.
    first = _first_victim(backend, world.base, first_victims, tmp_path_factory)
    key = keys.public_hex(keys.owner_key()) if owner_has_key else None
    before = sorted(p.relative_to(world.home) for p in world.home.rglob("*"))
    workdir, options, plant_home = make(world)
    fifo = workdir / f"probe-{secrets.token_hex(4)}"
    os.mkfifo(fifo)
    prober = Process(
        [
            *world.base.wrap,
            *run_argv(workdir, PYTHON, PROBE, str(fifo), options=("--backend", backend, *options)),
        ]
    )
    try:
        prober.wait_line("PROBE-READY")
        # A session of the owner's started after the prober's sandbox was built.
        victims.append(_victim(backend, world.base, world.tmp / "work", dict(os.environ)))
        host_paths = [p for victim in (first, *victims) for p in victim.paths] + [
            world.key_dir,
            world.key_dir / "owner.key",
            world.home / ".local" / "state" / "sandbridge",
        ]
        request = {
            "paths": [str(view) for p in host_paths for view in _views(p, options)],
            "roots": [str(workdir), "/tmp", "/run", str(world.home)]
            + [value.partition(":")[2] or value for value in options[1::2]],
            "home": str(plant_home) if plant_home else None,
        }
        fifo.write_text(json.dumps(request))
        report = json.loads(prober.wait_line("PROBE ").removeprefix("PROBE "))
    finally:
        prober.stop()
        fifo.unlink()  # (a workdir may be the module's)
    assert report["paths"] == {}
    assert report["found"] == []
    assert len(report["plant"]) == (4 if plant_home else 0)
    # Whatever the attempts did inside, the owner's dirs on the host are as they were:
    # nothing moved, nothing planted.
    after = sorted(p.relative_to(world.home) for p in world.home.rglob("*"))
    created = {Path(".config"), Path(".config/sandbridge"), Path(".local")}
    created |= {Path(".local/state"), Path(".local/state/sandbridge")}
    # The list of the owner's projects (places/known_projects.py), and its lock.
    created |= {Path(".local/state/sandbridge/projects")}
    created |= {Path(".local/state/sandbridge/.projects.lock")}
    # The lock a session takes to make or remove its placeholders (places/placeholder_lock.py).
    created |= {Path(".local/state/sandbridge/.placeholders.lock")}
    # The helper the entry installs in a home the workdir shows (docs/runner.md).
    created |= {Path(".local/bin"), Path(".local/bin/ags-webview-url")}
    created.add(fifo.relative_to(world.home) if fifo.is_relative_to(world.home) else fifo)
    # sandbridge's own empty placeholders of protected paths in a writable mount (kept
    # while another session shares the mount: sandbox/protected_paths.py).
    created |= _placeholders(world.home, set(after) - set(before))
    assert set(after) - set(before) <= created, after
    assert set(before) <= set(after)
    if key is None:
        assert not (world.key_dir / "owner.key").exists()
    else:
        assert keys.public_hex(keys.owner_key()) == key
