"""The suite's private home and the check that it leaves the user's alone
(tests/private_home.py, wired in tests/conftest.py)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from tests.conftest import (
    PRIVATE_TREE,
    SANDBRIDGE,
    STARTS_A_SANDBOX,
    USER_ENVIRONMENT,
    USER_STATE,
    Process,
    run_argv,
)
from tests.private_home import PRIVATE_VARIABLES, UserState


def test_every_directory_variable_points_into_the_private_tree() -> None:
    for name in PRIVATE_VARIABLES:
        path = Path(os.environ[name])
        assert path.is_relative_to(PRIVATE_TREE), name
        assert path.is_dir(), name
        assert str(path) != USER_ENVIRONMENT.get(name), name


def test_a_child_process_finds_the_private_home() -> None:
    script = "import pathlib; print(pathlib.Path.home())"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert Path(result.stdout.strip()) == Path(os.environ["HOME"])


def test_a_project_a_test_sets_up_is_remembered_in_the_private_state(tmp_path: Path) -> None:
    """``policy init`` remembers its project (places/known_projects.py): in the suite's
    state, never the user's."""
    project = tmp_path / "p"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    result = subprocess.run(
        [*SANDBRIDGE, "policy", "init", str(project)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    state = Path(os.environ["XDG_STATE_HOME"]) / "sandbridge" / "projects"
    assert str(project) in state.read_text().splitlines()
    assert not USER_STATE.changes(UserState.take(USER_ENVIRONMENT))


def _environ(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "home").mkdir()
    (tmp_path / "run").mkdir()
    return {"HOME": str(tmp_path / "home"), "XDG_RUNTIME_DIR": str(tmp_path / "run")}


def test_the_check_names_what_appeared_changed_and_went(tmp_path: Path) -> None:
    environ = _environ(tmp_path)
    state = tmp_path / "home" / ".local" / "state" / "sandbridge"
    state.mkdir(parents=True)
    (state / "projects").write_text("/a\n")
    (state / "gone").write_text("")
    before = UserState.take(environ)
    (state / "projects").write_text("/a\n/b\n")
    (state / "gone").unlink()
    (tmp_path / "run" / "sandbridge-0").mkdir()
    (tmp_path / "run" / "unrelated").mkdir()
    lines = before.changes(UserState.take(environ))
    assert [line.split(" (")[0] for line in lines] == [
        f"changed: {state}",
        f"removed: {state / 'gone'}",
        f"changed: {state / 'projects'}",
        f"created: {tmp_path / 'run' / 'sandbridge-0'}",
    ]


def test_the_check_opens_no_file_and_follows_no_link(tmp_path: Path) -> None:
    """A FIFO would block a reader, and a link leads out of the user's directories: the
    check notes both by their metadata."""
    environ = _environ(tmp_path)
    config = tmp_path / "home" / ".config" / "sandbridge"
    config.mkdir(parents=True)
    os.mkfifo(config / "fifo")
    (config / "link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "file").write_text("")
    entries = UserState.take(environ).entries
    assert entries[str(config / "fifo")].kind == "p"
    assert entries[str(config / "link")].kind == "l"
    assert not any("elsewhere" in path for path in entries)


@STARTS_A_SANDBOX
def test_a_session_of_a_test_lives_in_the_private_runtime_dir(tmp_path: Path) -> None:
    """The user's ``sandbridge ls`` and dashboard look in the user's runtime base: a
    test's session, started with the environment every test inherits, is never there."""
    work = tmp_path / "work"
    work.mkdir()
    name = f"t-{secrets.token_hex(4)}"
    process = Process(
        run_argv(work, "sh", "-c", "echo READY; exec sleep 60", options=("--name", name))
    )
    try:
        process.wait_line("READY", timeout=60)
        private = Path(os.environ["XDG_RUNTIME_DIR"])
        runtime = f"ags-webview-relay-{process.popen.pid}"
        assert (private / runtime).is_dir()
        assert (private / f"sandbridge-{os.getuid()}" / "sessions" / name).is_dir()
        users = UserState.runtime_base(USER_ENVIRONMENT)
        assert not (users / runtime).exists()
    finally:
        process.stop()
