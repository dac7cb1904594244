"""The checks of sandbridge's directories for this user: found, missing, not private."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbridge.doctor import place_checks
from sandbridge.doctor.finding import Status


@pytest.fixture(autouse=True)
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own runtime and state dirs (never the user's)."""
    (tmp_path / "run").mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def test_runtime_dirs_in_xdg_runtime_dir_are_fine(dirs: Path) -> None:
    finding = place_checks.runtime_dirs()
    assert (finding.status, finding.found) == (Status.OK, f"each session's is made in {dirs}/run")


def test_runtime_dirs_without_xdg_runtime_dir_go_to_tmp_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    finding = place_checks.runtime_dirs()
    assert finding.status is Status.WARN
    assert finding.found.startswith("XDG_RUNTIME_DIR is unset: sessions use /tmp")
    assert "export XDG_RUNTIME_DIR" in finding.fix


def test_a_runtime_base_that_is_not_there_fails(
    dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(dirs / "gone"))
    finding = place_checks.runtime_dirs()
    assert finding.status is Status.FAIL
    assert (
        finding.found == f"{dirs}/gone is not a directory this user can write: no session can start"
    )


def test_state_dir_not_made_yet_is_fine_and_doctor_does_not_make_it(dirs: Path) -> None:
    finding = place_checks.state_dir()
    assert finding.status is Status.OK
    assert finding.found.endswith("not there yet, made at the first `sandbridge run`")
    assert not (dirs / "state").exists()


def test_a_state_dir_others_can_open_is_named_with_its_mode(dirs: Path) -> None:
    (dirs / "state" / "sandbridge").mkdir(parents=True, mode=0o755)
    os.chmod(dirs / "state" / "sandbridge", 0o755)
    finding = place_checks.state_dir()
    assert finding.status is Status.WARN
    assert "has mode 755" in finding.found
    assert finding.fix == f"chmod 700 {dirs}/state/sandbridge if yours"


def test_session_state_owned_by_another_user_is_a_warning(dirs: Path) -> None:
    root = dirs / "run" / f"sandbridge-{os.getuid()}"
    root.mkdir(mode=0o700)
    os.chown(root, 65534, 65534)
    finding = place_checks.session_state()
    assert finding.status is Status.WARN
    assert "owned by uid 65534" in finding.found


def test_known_projects_are_counted(dirs: Path) -> None:
    state = dirs / "state" / "sandbridge"
    state.mkdir(parents=True, mode=0o700)
    (state / "projects").write_text("/srv/a\n/srv/b\n")
    finding = place_checks.known_projects_list()
    assert (finding.status, finding.found) == (Status.OK, f"2 in {state}/projects")


def test_a_known_projects_list_that_is_not_a_file_is_a_warning_with_its_fix(dirs: Path) -> None:
    state = dirs / "state" / "sandbridge"
    (state / "projects").mkdir(parents=True)
    finding = place_checks.known_projects_list()
    assert finding.status is Status.WARN
    assert finding.found.startswith(f"{state}/projects cannot be read")
    assert (
        finding.fix
        == f"remove {state}/projects; each project's next `sandbridge run` enters it again"
    )
