"""Which layouts are refused, and what is masked and pinned, for sandbridge's host paths.

Pure decisions on real directories; tests/sandbox/test_host_paths_isolation.py proves the
same in real sandboxes."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.exceptions import SandboxError
from sandbridge.sandbox.host_paths import Guard, Layer, plan
from sandbridge.sandbox.mounts import Mount


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home, a runtime base ``xdg`` and a workdir ``work``, side by side in tmp_path."""
    path = tmp_path / "home"
    path.mkdir()
    (tmp_path / "xdg").mkdir(mode=0o700)
    (tmp_path / "work").mkdir()
    monkeypatch.setenv("HOME", str(path))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return path


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory the read-only host root shows (not under /tmp, /run or home)."""
    path = Path(tempfile.mkdtemp(prefix="sandbridge-test-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def workdir(path: Path) -> Layer:
    return Layer(Mount(path, path, writable=True), "workdir")


def ro_bind(source: Path, dest: Path | None = None) -> Layer:
    return Layer(Mount(source, dest or source, writable=False), "--ro-bind")


def guard(home: Path, *layers: Layer) -> Guard:
    return plan(list(layers), home)


def test_a_workdir_beside_everything_needs_no_mask(home: Path) -> None:
    assert guard(home, workdir(home.parent / "work")) == Guard(pins=((),))


def test_a_workdir_holding_the_runtime_base_and_home_masks_both_and_pins_the_way(
    home: Path,
) -> None:
    top = home.parent
    result = guard(home, workdir(top))
    assert result.masked == (
        top / "xdg",
        home / ".config" / "sandbridge",
        home / ".local" / "state" / "sandbridge",
    )
    assert [pin.dest for pin in result.pins[0]] == [
        home,
        home / ".config",
        home / ".local",
        home / ".local" / "state",
    ]
    assert all(pin.source == pin.dest and pin.writable for pin in result.pins[0])
    # Made before the sandbox starts, so the masks hide what is created there later.
    assert (home / ".config" / "sandbridge").stat().st_mode & 0o777 == 0o700


def test_a_read_only_bind_is_masked_at_its_destination_and_needs_no_pins(home: Path) -> None:
    result = guard(home, workdir(home.parent / "work"), ro_bind(home, Path("/srv")))
    assert result.masked == (
        Path("/srv/.config/sandbridge"),
        Path("/srv/.local/state/sandbridge"),
    )
    assert result.pins == ((), ())


def test_sandbridge_dirs_the_host_root_shows_are_hidden_before_any_bind(
    home: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (outside / "xdg").mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(outside / "xdg"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(outside / "config"))
    result = guard(home, workdir(outside / "xdg" / "work"))
    assert result.private == (outside / "xdg", outside / "config" / "sandbridge")
    assert (outside / "config" / "sandbridge").is_dir()


@pytest.mark.parametrize(
    ("layer", "message"),
    [
        (lambda h: workdir(Path("/tmp")), "workdir /tmp: sandbridge sessions keep their"),
        (lambda h: ro_bind(h.parent / "xdg"), "use a subdirectory such as"),
        (lambda h: workdir(Path("/")), "workdir /: it shows the host's /proc"),
        (lambda h: ro_bind(Path("/proc/self")), "shows the host's /proc"),
        (lambda h: ro_bind(h / ".config" / "sandbridge"), "sandbridge's private dir"),
        (lambda h: ro_bind(h / ".local" / "state" / "sandbridge" / "x"), "private dir"),
        (lambda h: ro_bind(Path("/tmp/sandbridge-0")), "sandbridge's own session state"),
        (lambda h: ro_bind(Path("/tmp/ags-webview-relay-1.abc/x")), "own session state"),
        (lambda h: ro_bind(h.parent / "xdg" / "sandbridge-0.x1"), "own session state"),
    ],
)
def test_a_layer_no_mask_can_make_safe_is_refused_naming_it(
    home: Path, layer: object, message: str
) -> None:
    chosen = layer(home)  # type: ignore[operator]
    with pytest.raises(SandboxError, match=message) as refused:
        guard(home, chosen)
    assert str(chosen.mount.source) in str(refused.value)


def test_a_subdirectory_of_a_runtime_base_is_fine(home: Path) -> None:
    assert guard(home, workdir(home.parent / "xdg" / "work")).masked == ()
    assert guard(home, ro_bind(Path("/tmp/sandbridge-unrelated"))).masked == ()


def test_a_replaceable_link_on_the_way_to_the_key_dir_is_refused(home: Path) -> None:
    real = home.parent / "real-config"
    real.mkdir()
    (home / ".config").symlink_to(real)
    with pytest.raises(SandboxError, match=r"\.config is a symlink the sandbox could replace"):
        guard(home, workdir(home))
    # Read-only, the link cannot be replaced: the real dir is masked where it shows.
    assert guard(home, ro_bind(home.parent)).masked[1:] == (
        home.parent / "real-config" / "sandbridge",
        home / ".local" / "state" / "sandbridge",
    )


def test_planning_without_create_makes_nothing(home: Path) -> None:
    plan([workdir(home)], home, create=False)
    assert list(home.iterdir()) == []
