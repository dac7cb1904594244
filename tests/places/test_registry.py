"""Session ids, liveness and ``sandbridge ls``: real directories, locks and processes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.exceptions import SessionError
from sandbridge.places.registry import (
    AppRecord,
    SessionEntry,
    list_sessions,
    session_path,
    sessions_dir,
    validate_name,
)
from tests.conftest import ECHO_APP, PYTHON, SANDBRIDGE, STARTS_A_SANDBOX, Process, run_argv
from tests.support.command_in_process import sandbridge


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "state"


def test_created_session_is_listed_with_its_id_pid_and_workdir(root: Path) -> None:
    entry = SessionEntry.create("work", Path("/srv/project"), root)
    try:
        [record] = list_sessions(root)
        assert (record.id, record.pid, record.workdir) == ("work", os.getpid(), "/srv/project")
    finally:
        entry.remove()
    assert list_sessions(root) == []


def test_unnamed_session_gets_a_random_id(root: Path) -> None:
    first = SessionEntry.create(None, Path("/"), root)
    second = SessionEntry.create(None, Path("/"), root)
    try:
        assert first.id != second.id
        assert all(validate_name(entry.id) for entry in (first, second))
    finally:
        first.remove()
        second.remove()


def test_state_directories_are_private(root: Path) -> None:
    entry = SessionEntry.create("private", Path("/"), root)
    try:
        for path in (root, root / "sessions", entry.path):
            assert path.stat().st_mode & 0o777 == 0o700
    finally:
        entry.remove()


def test_a_name_held_by_a_live_session_is_refused(root: Path) -> None:
    entry = SessionEntry.create("taken", Path("/"), root)
    try:
        with pytest.raises(SessionError, match="'taken' is already running"):
            SessionEntry.create("taken", Path("/"), root)
    finally:
        entry.remove()


@pytest.mark.parametrize("name", ["", "Upper", "-dash", ".dot", "a/b", "x" * 41, "sp ace"])
def test_a_bad_name_is_refused_with_the_offending_value(root: Path, name: str) -> None:
    with pytest.raises(SessionError, match=re.escape(f"--name {name!r}")):
        SessionEntry.create(name, Path("/"), root)


def test_session_of_a_killed_process_is_stale_and_its_name_reusable(root: Path) -> None:
    code = (
        "import sys; from pathlib import Path;"
        "from sandbridge.places.registry import SessionEntry;"
        f"SessionEntry.create('crashed', Path('/'), Path({str(root)!r}));"
        "print('READY', flush=True); sys.stdin.read()"
    )
    child = subprocess.Popen(
        [PYTHON, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "READY"
    assert [record.id for record in list_sessions(root)] == ["crashed"]
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert list_sessions(root) == []
    assert not (root / "sessions" / "crashed").exists()
    SessionEntry.create("crashed", Path("/"), root).remove()


def test_apps_are_recorded_without_secrets(root: Path) -> None:
    entry = SessionEntry.create("apps", Path("/"), root)
    try:
        entry.set_apps([AppRecord(8000, 41000, "/app", "http://127.0.0.1:41000/app", True)])
        [record] = list_sessions(root)
        assert record.apps == [AppRecord(8000, 41000, "/app", "http://127.0.0.1:41000/app", True)]
    finally:
        entry.remove()


def test_session_path_refuses_unknown_and_malformed_ids(root: Path) -> None:
    entry = SessionEntry.create("known", Path("/"), root)
    try:
        assert session_path("known", root) == entry.path
        with pytest.raises(SessionError, match="no running session 'gone'"):
            session_path("gone", root)
        with pytest.raises(SessionError, match=re.escape("session '../etc'")):
            session_path("../etc", root)
    finally:
        entry.remove()


def test_a_state_root_open_to_others_is_refused(root: Path) -> None:
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    with pytest.raises(SessionError, match="has mode 755; run chmod 700"):
        SessionEntry.create("x", Path("/"), root)


def test_a_state_root_that_is_a_symlink_is_refused(root: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    root.symlink_to(target)
    with pytest.raises(SessionError, match="is not a directory"):
        SessionEntry.create("x", Path("/"), root)


@STARTS_A_SANDBOX
def test_run_prints_its_session_id_and_ls_shows_it_with_its_app(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(xdg)}
    argv = run_argv(tmp_path, PYTHON, ECHO_APP, "--register", "4173", options=("--name", "demo-1"))
    session = Process(argv, env=env)
    try:
        assert session.wait_line("sandbridge: session", "stderr") == "sandbridge: session demo-1"
        session.wait_line("sandbridge: sandbox port", "stderr")
        # The owner's commands in this process (tests/support/command_in_process.py).
        listed = sandbridge("ls", "--json", env=env)
        assert listed.returncode == 0, listed.stderr
        [record] = json.loads(listed.stdout)
        assert record["id"] == "demo-1"
        [url] = [app["url"] for app in record["apps"]]
        port = record["apps"][0]["host_port"]
        assert re.fullmatch(rf"http://[a-z2-7]{{26}}\.localhost:{port}/", url)
        text = sandbridge("ls", env=env).stdout
        assert text.startswith("demo-1  pid ") and f"-> {url}" in text
        clash = subprocess.run(
            [*SANDBRIDGE, "run", "--name", "demo-1", "--", "true"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert clash.returncode == 2
        assert "session 'demo-1' is already running" in clash.stderr
    finally:
        session.stop()
    gone = sandbridge("ls", env=env)
    assert (gone.returncode, gone.stdout) == (0, "no running sessions\n")


NOBODY = 65534


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A runtime base like /tmp: world-writable and sticky (and a short path, as socket
    paths in it must fit AF_UNIX's 108 bytes)."""
    assert os.getuid() == 0, "the squatter is another user: this test needs root"
    top = Path(tempfile.mkdtemp(prefix="sq-", dir="/tmp"))
    base = top / "shared"
    base.mkdir()
    os.chmod(base, 0o1777)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    yield base
    shutil.rmtree(top, ignore_errors=True)


def _squat_state_root(shared: Path, how: str) -> Path:
    primary = shared / f"sandbridge-{os.getuid()}"
    if how == "symlink":
        target = shared.parent / "planted"
        target.mkdir(mode=0o700)
        primary.symlink_to(target)
        os.lchown(primary, NOBODY, NOBODY)
    else:
        primary.mkdir(mode=0o777)
        os.chown(primary, NOBODY, NOBODY)
    return primary


@pytest.mark.parametrize("how", ["foreign-dir", "symlink"])
def test_a_squatted_state_root_gives_a_private_fallback_that_ls_finds(
    shared: Path, how: str
) -> None:
    primary = _squat_state_root(shared, how)
    # A squatter's dir named like a fallback is not ours: never used nor listed.
    decoy = shared / f"sandbridge-{os.getuid()}.decoy"
    decoy.mkdir(mode=0o700)
    os.chown(decoy, NOBODY, NOBODY)
    entry = SessionEntry.create("squatted", Path("/"))
    try:
        fallback = entry.path.parent.parent
        assert fallback.parent == shared and fallback.name.startswith(f"{primary.name}.")
        assert fallback != decoy
        assert stat.S_IMODE(fallback.lstat().st_mode) == 0o700
        assert entry.note is not None and entry.note.startswith(str(primary))
        assert entry.note.endswith(f"session state is in {fallback} instead")
        assert [record.id for record in list_sessions()] == ["squatted"]
        assert session_path("squatted") == entry.path
        second = SessionEntry.create("second", Path("/"))
        assert second.path.parent.parent == fallback  # reused, not one per session
        second.remove()
        if how == "symlink":
            assert list((shared.parent / "planted").iterdir()) == []
    finally:
        entry.remove()
    assert not fallback.exists()  # the last session out removes it
    assert os.path.lexists(primary) and decoy.exists()  # the squatter's, untouched


@pytest.mark.parametrize("how", ["foreign-dir", "symlink"])
@STARTS_A_SANDBOX
def test_run_starts_beside_squatted_dirs_says_why_and_ls_lists_it(
    shared: Path, tmp_path: Path, how: str
) -> None:
    _squat_state_root(shared, how)
    work = tmp_path / "work"
    work.mkdir()
    # The runtime dir's name holds the pid of `sandbridge run`: squat it from a shell that
    # then execs sandbridge in the same process.
    runtime = shared / "ags-webview-relay-$$"
    squat = (
        f"mkdir -m 777 {runtime} && chown {NOBODY} {runtime}"
        if how == "foreign-dir"
        else f"ln -s {tmp_path} {runtime} && chown -h {NOBODY} {runtime}"
    )
    argv = run_argv(work, PYTHON, ECHO_APP, "--register", "4173", options=("--name", "sq"))
    session = Process(["sh", "-c", f'{squat} && exec "$@"', "sh", *argv])
    try:
        why = "belongs to uid 65534" if how == "foreign-dir" else "is a symlink"
        line = session.wait_line(f"sandbridge: {shared}/ags-webview-relay-", "stderr")
        assert f"ags-webview-relay-{session.popen.pid} {why}; the runtime dir is " in line
        line = session.wait_line(f"sandbridge: {shared}/sandbridge-", "stderr")
        assert why in line and "session state is in" in line
        session.wait_line("READY")
        listed = sandbridge("ls", "--json")  # in this process
        assert [record["id"] for record in json.loads(listed.stdout)] == ["sq"]
        status = sandbridge("status", "sq")
        assert status.returncode == 0, status.stderr
    finally:
        assert session.stop() == 128 + signal.SIGTERM


def test_a_session_dir_being_made_is_not_swept_by_a_session_starting_beside_it(
    root: Path,
) -> None:
    """Between its ``mkdir`` and its lock a new session's dir is unlocked, as an ended
    one's is: the other session's sweep removed it, and the first start failed with a
    traceback (``FileNotFoundError`` on its own staging dir). Left alone while fresh."""
    first = SessionEntry.create("first", Path("/srv/project"), root)
    first.remove()  # the sessions dir exists now
    staging = sessions_dir(root) / ".new-0123456789abcdef"  # made, not locked yet
    staging.mkdir(mode=0o700)
    entry = SessionEntry.create("beside", Path("/srv/project"), root)  # sweeps
    entry.remove()
    assert staging.is_dir()
    long_ago = time.time() - 3600  # a start that died between mkdir and lock
    os.utime(staging, (long_ago, long_ago))
    SessionEntry.create("later", Path("/srv/project"), root).remove()
    assert not staging.exists()
