"""The runtime dir: its mode, its lock, stale cleanup that never follows links."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sandbridge.exceptions import RuntimeDirError
from sandbridge.places.runtime_dir import RuntimeDir, clean_stale, default_path


def test_path_follows_the_contract(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert default_path(123) == tmp_path / "ags-webview-relay-123"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert default_path(123) == Path("/tmp/ags-webview-relay-123")


def test_created_dir_is_0700_and_removed(tmp_path: Path) -> None:
    runtime = RuntimeDir.create(tmp_path / "ags-webview-relay-1")
    assert stat.S_IMODE(runtime.path.stat().st_mode) == 0o700
    runtime.remove()
    assert not runtime.path.exists()


def test_stale_dir_of_a_dead_session_is_cleaned(tmp_path: Path) -> None:
    stale = tmp_path / "ags-webview-relay-999999"
    stale.mkdir()
    (stale / "relay.sock").write_text("left over")
    assert clean_stale(tmp_path) == [stale]
    assert not stale.exists()


def test_live_session_dir_is_left_alone(tmp_path: Path) -> None:
    live = tmp_path / "ags-webview-relay-4242"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path;"
            "from sandbridge.places.runtime_dir import RuntimeDir;"
            "RuntimeDir.create(Path(sys.argv[1])); print('locked', flush=True); sys.stdin.read()",
            str(live),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        assert clean_stale(tmp_path) == []
        assert live.exists()
        with pytest.raises(RuntimeDirError, match="belongs to a live session"):
            RuntimeDir.create(live)
    finally:
        holder.communicate("")
    assert clean_stale(tmp_path) == [live]


def test_cleanup_never_follows_a_symlink_out(tmp_path: Path) -> None:
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "file").write_text("keep")
    base = tmp_path / "base"
    base.mkdir()
    (base / "ags-webview-relay-999998").symlink_to(outside)
    stale = base / "ags-webview-relay-999997"
    stale.mkdir()
    (stale / "link").symlink_to(outside)
    clean_stale(base)
    assert (outside / "file").read_text() == "keep"
    assert (base / "ags-webview-relay-999998").is_symlink()
    assert not stale.exists()


def test_other_names_are_never_touched(tmp_path: Path) -> None:
    for name in ("ags-webview-relay-abc", "ags-webview-relay-", "other-1"):
        (tmp_path / name).mkdir()
    assert clean_stale(tmp_path) == []


def test_adopting_a_group_readable_dir_is_refused(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    with pytest.raises(RuntimeDirError, match="chmod 700"):
        RuntimeDir.adopt(loose)


def test_a_dir_being_created_is_never_cleaned_by_a_session_starting_beside_it(
    tmp_path: Path,
) -> None:
    cleaner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path;"
            "from sandbridge.places.runtime_dir import clean_stale;"
            "print('cleaning', flush=True)\n"
            "while True: clean_stale(Path(sys.argv[1]))",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert cleaner.stdout is not None and cleaner.stdout.readline() == "cleaning\n"
        for number in range(1000):
            runtime = RuntimeDir.create(tmp_path / f"ags-webview-relay-{number}")
            assert runtime.path.is_dir(), f"creation {number} lost its dir to the cleaner"
            runtime.remove()
    finally:
        cleaner.kill()
        cleaner.wait()
    assert [path.name for path in tmp_path.iterdir()] == []


NOBODY = 65534


def _squat(path: Path, how: str, elsewhere: Path) -> None:
    """What another local user can leave at ``path`` in a shared directory."""
    if how == "foreign-dir":
        path.mkdir(mode=0o777)
        os.chown(path, NOBODY, NOBODY)
    elif how == "symlink":
        path.symlink_to(elsewhere)
        os.lchown(path, NOBODY, NOBODY)
    else:
        path.write_text("")
        os.chown(path, NOBODY, NOBODY)


@pytest.mark.parametrize(
    ("how", "why"),
    [
        ("foreign-dir", f"belongs to uid {NOBODY}"),
        ("symlink", "is a symlink"),
        ("file", "is not a directory"),
    ],
)
def test_a_squatted_contract_path_gives_a_fresh_dir_beside_it_and_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, how: str, why: str
) -> None:
    assert os.getuid() == 0, "the squatter is another user: this test needs root"
    base = tmp_path / "shared"
    base.mkdir(mode=0o1777)
    os.chmod(base, 0o1777)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    _squat(default_path(), how, elsewhere)
    runtime = RuntimeDir.create()
    try:
        assert runtime.path.parent == base
        assert runtime.path.name.startswith(f"ags-webview-relay-{os.getpid()}.")
        info = runtime.path.lstat()
        assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700
        assert runtime.note == f"{default_path()} {why}; the runtime dir is {runtime.path} instead"
        assert list(elsewhere.iterdir()) == []
    finally:
        runtime.remove()
    assert os.path.lexists(default_path())  # the squatter's, never removed


def test_a_stale_fallback_dir_is_cleaned_like_any_runtime_dir(tmp_path: Path) -> None:
    stale = tmp_path / "ags-webview-relay-999999.0123abcd"
    stale.mkdir()
    assert clean_stale(tmp_path) == [stale]


def stale_socket(path: Path) -> None:
    """A socket file nobody listens on: what a host killed with SIGKILL leaves."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))


def test_adopting_a_dir_with_a_killed_hosts_sockets_removes_them(tmp_path: Path) -> None:
    """The next ``sandbridge host --runtime-dir`` bound its sockets over them: the bind
    failed with a traceback (``Address already in use``)."""
    path = tmp_path / "rt"
    path.mkdir(mode=0o700)
    stale_socket(path / "relay.sock")
    os.symlink("/etc/passwd", path / "egress.sock")  # the container's doing
    stale_socket(path / "upstream.sock")  # the container's own: left alone
    runtime = RuntimeDir.adopt(path)
    try:
        assert sorted(os.listdir(path)) == ["upstream.sock"]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind(str(runtime.relay_socket))
    finally:
        runtime.remove()


def test_adopting_a_dir_whose_socket_name_the_container_took_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rt"
    path.mkdir(mode=0o700)
    (path / "relay.sock").mkdir()
    (path / "relay.sock" / "x").write_text("")
    with pytest.raises(RuntimeDirError) as caught:
        RuntimeDir.adopt(path)
    assert str(caught.value) == (
        f"{path / 'relay.sock'}: cannot be removed to bind sandbridge's socket there (Is a "
        "directory); the container can write the runtime dir: remove it"
    )
    shutil.rmtree(path / "relay.sock")
    RuntimeDir.adopt(path).remove()  # the lock was let go
