"""The list of projects whose policy directories every sandbox hides."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from sandbridge.places import known_projects


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "sandbridge"


def project(path: Path, policy: bool = True) -> Path:
    path.mkdir(parents=True)
    if policy:
        (path / ".sandbridge").mkdir()
    return path


def test_a_remembered_project_with_a_policy_dir_is_listed(tmp_path: Path, state: Path) -> None:
    first, second = project(tmp_path / "one"), project(tmp_path / "two")
    bare = project(tmp_path / "bare", policy=False)
    for root in (first, second, bare, first):
        known_projects.remember(root)
    assert known_projects.policy_dirs() == [second / ".sandbridge", first / ".sandbridge"]
    assert (state / "projects").read_text().splitlines() == [str(second), str(bare), str(first)]
    assert (state.stat().st_mode & 0o777, (state / "projects").stat().st_mode & 0o777) == (
        0o700,
        0o600,
    )


def test_a_policy_dir_that_is_a_link_is_not_listed(tmp_path: Path) -> None:
    root = project(tmp_path / "linked", policy=False)
    (root / ".sandbridge").symlink_to(project(tmp_path / "elsewhere"))
    known_projects.remember(root)
    assert known_projects.policy_dirs() == []


def test_gone_projects_are_dropped_and_the_list_is_bounded(
    tmp_path: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(known_projects, "MAX_PROJECTS", 3)
    roots = [project(tmp_path / f"p{index}") for index in range(5)]
    for root in roots:
        known_projects.remember(root)
    assert known_projects.policy_dirs() == [root / ".sandbridge" for root in roots[2:]]
    (roots[3] / ".sandbridge").rmdir()
    roots[3].rmdir()
    known_projects.remember(roots[0])
    assert (state / "projects").read_text().splitlines() == [
        str(roots[2]),
        str(roots[4]),
        str(roots[0]),
    ]


def test_lines_that_are_not_clean_absolute_paths_are_skipped(tmp_path: Path, state: Path) -> None:
    good = project(tmp_path / "good")
    state.mkdir(parents=True, mode=0o700)
    (state / "projects").write_bytes(
        b"relative/path\n/a/../b\n" + str(good).encode() + b"\n\n/x\0y\n"
    )
    assert known_projects.policy_dirs() == [good / ".sandbridge"]


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_a_list_that_is_not_a_regular_file_is_refused_without_blocking(
    tmp_path: Path, state: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sandbridge")
    state.mkdir(parents=True, mode=0o700)
    if kind == "fifo":
        os.mkfifo(state / "projects")
    else:
        target = tmp_path / "target"
        target.write_text(f"{project(tmp_path / 'p')}\n")
        (state / "projects").symlink_to(target)
    assert known_projects.policy_dirs() == []
    assert "known_projects.unreadable" in caplog.text


def test_a_list_that_cannot_be_written_is_a_warning(
    tmp_path: Path, state: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sandbridge")
    state.parent.mkdir(parents=True)
    state.write_text("a file where the directory goes\n")
    known_projects.remember(project(tmp_path / "p"))
    assert "known_projects.not_written" in caplog.text
