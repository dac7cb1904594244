"""Session ids, liveness and ``sandbridge ls``: real directories, locks and processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from sandbridge.host.session_registry import (
    AppRecord,
    SessionEntry,
    SessionError,
    list_sessions,
    session_path,
    validate_name,
)
from tests.conftest import ECHO_APP, PYTHON, SANDBRIDGE, Process, run_argv


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
        "from sandbridge.host.session_registry import SessionEntry;"
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


def test_run_prints_its_session_id_and_ls_shows_it_with_its_app(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(xdg)}
    argv = run_argv(tmp_path, PYTHON, ECHO_APP, "--register", "4173", options=("--name", "demo-1"))
    session = Process(argv, env=env)
    try:
        assert session.wait_line("sandbridge: session", "stderr") == "sandbridge: session demo-1"
        session.wait_line("sandbridge: sandbox port", "stderr")
        listed = subprocess.run(
            [*SANDBRIDGE, "ls", "--json"], env=env, capture_output=True, text=True, check=True
        )
        [record] = json.loads(listed.stdout)
        assert record["id"] == "demo-1"
        assert [app["url"] for app in record["apps"]] == [
            f"http://127.0.0.1:{record['apps'][0]['host_port']}/"
        ]
        text = subprocess.run(
            [*SANDBRIDGE, "ls"], env=env, capture_output=True, text=True, check=True
        ).stdout
        assert text.startswith("demo-1  pid ") and "-> http://127.0.0.1:" in text
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
    gone = subprocess.run([*SANDBRIDGE, "ls"], env=env, capture_output=True, text=True, check=True)
    assert gone.stdout == "no running sessions\n"
