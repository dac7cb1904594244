"""No sandbox sees another session's runtime dir, state dir or sockets, nor the owner's key
dir, whatever its workdir, binds, ``XDG_RUNTIME_DIR`` and backend: each layout either is
refused before anything starts or runs with none of it in sight (docs/security.md)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
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
class World:
    """A test's home and, when set, its XDG_RUNTIME_DIR (else sessions use /tmp)."""

    tmp: Path
    home: Path
    xdg: Path | None

    @property
    def key_dir(self) -> Path:
        return self.home / ".config" / "sandbridge"


@pytest.fixture(params=["xdg-set", "xdg-unset"])
def world(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    xdg = None
    if request.param == "xdg-set":
        xdg = tmp_path / "xdg"
        xdg.mkdir(mode=0o700)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    else:
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    (tmp_path / "work").mkdir()
    return World(tmp_path, home, xdg)


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
    "workdir-above-runtime-base-and-home": (lambda w: (w.tmp, (), w.home), True),
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
    """A running session and the host paths of everything it owns."""

    process: Process
    paths: list[Path]


def _victim(backend: str, world: World) -> Victim:
    name = f"victim-{secrets.token_hex(4)}"
    process = Process(
        run_argv(
            world.tmp / "work",
            PYTHON,
            ECHO_APP,
            "--register",
            "4173",
            options=("--backend", backend, "--name", name),
        )
    )
    process.wait_line("READY")
    runtime = runtime_base() / f"ags-webview-relay-{process.popen.pid}"
    state = session_path(name)
    assert runtime.is_dir() and state.is_dir()
    return Victim(
        process,
        [
            runtime,
            *(runtime / sock for sock in ("relay.sock", "upstream.sock", "egress.sock")),
            state.parent.parent,
            state,
            state / "control.sock",
        ],
    )


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
    backend: str, world: World, layout: str, victims: list[Victim]
) -> None:
    make, owner_has_key = RUNNING[layout]
    key = keys.public_hex(keys.owner_key()) if owner_has_key else None
    before = sorted(p.relative_to(world.home) for p in world.home.rglob("*"))
    victims.append(_victim(backend, world))
    workdir, options, plant_home = make(world)
    fifo = workdir / f"probe-{secrets.token_hex(4)}"
    os.mkfifo(fifo)
    prober = Process(
        run_argv(workdir, PYTHON, PROBE, str(fifo), options=("--backend", backend, *options))
    )
    try:
        prober.wait_line("PROBE-READY")
        # A session started after the prober's sandbox was built.
        victims.append(_victim(backend, world))
        host_paths = [p for victim in victims for p in victim.paths] + [
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
