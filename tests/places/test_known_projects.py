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


def test_the_list_is_not_rewritten_when_the_project_is_already_its_most_recent(
    tmp_path: Path, state: Path
) -> None:
    first, second = project(tmp_path / "one"), project(tmp_path / "two")
    known_projects.remember(first)
    known_projects.remember(second)
    written = (state / "projects").stat()
    known_projects.remember(second)
    again = (state / "projects").stat()
    assert (again.st_ino, again.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    known_projects.remember(first)  # no longer the most recent: written
    assert (state / "projects").stat().st_ino != written.st_ino
    assert (state / "projects").read_text().splitlines() == [str(second), str(first)]


def test_a_gone_project_is_dropped_when_the_most_recent_is_remembered_again(
    tmp_path: Path, state: Path
) -> None:
    first, second = project(tmp_path / "one"), project(tmp_path / "two")
    known_projects.remember(first)
    known_projects.remember(second)
    (first / ".sandbridge").rmdir()
    first.rmdir()
    known_projects.remember(second)
    assert (state / "projects").read_text().splitlines() == [str(second)]


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


def test_a_project_moved_behind_a_link_is_hidden_where_it_now_is(tmp_path: Path) -> None:
    """A sandbox that can write a known project's parent (a workdir holding it, in a
    session started before the project was known) moves it and leaves a link in its
    place (``mv b b-real; ln -s b-real b``). The view is laid at the directory the
    link leads to, never through the link (a backend would follow it wherever it
    points), and only if that is a ``.sandbridge`` directory."""
    moved = project(tmp_path / "code" / "b")
    known_projects.remember(moved)
    os.rename(moved, tmp_path / "code" / "b-real")
    (tmp_path / "code" / "b").symlink_to("b-real")
    assert known_projects.policy_dirs() == [tmp_path / "code" / "b-real" / ".sandbridge"]
    (tmp_path / "code" / "b").unlink()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "code" / "b").symlink_to(tmp_path / "elsewhere")
    assert known_projects.policy_dirs() == []


def test_a_gone_project_is_dropped_from_the_list_when_it_is_read(
    tmp_path: Path, state: Path
) -> None:
    """Reading prunes as writing does: the list no longer grows with every temporary
    project that is gone (a test run added 325 of them), and each start reads less."""
    kept, gone = project(tmp_path / "kept"), project(tmp_path / "gone")
    for root in (kept, gone):
        known_projects.remember(root)
    (gone / ".sandbridge").rmdir()
    gone.rmdir()
    before = (state / "projects").stat().st_ino
    assert known_projects.policy_dirs() == [kept / ".sandbridge"]
    assert (state / "projects").read_text().splitlines() == [str(kept)]
    assert (state / "projects").stat().st_ino != before  # written whole, renamed into place
    assert not (state / ".projects.new").exists()


def test_a_project_whose_policy_dir_alone_is_gone_stays_remembered(
    tmp_path: Path, state: Path
) -> None:
    root = project(tmp_path / "p")
    known_projects.remember(root)
    (root / ".sandbridge").rmdir()
    assert known_projects.policy_dirs() == []
    assert (state / "projects").read_text().splitlines() == [str(root)]


def test_a_project_gone_since_the_list_was_read_is_left_out_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kept, gone = project(tmp_path / "kept"), project(tmp_path / "gone")
    for root in (kept, gone):
        known_projects.remember(root)
    dirs = tuple(known_projects.policy_dirs())
    (gone / ".sandbridge").rmdir()
    with caplog.at_level(logging.INFO, logger="sandbridge"):
        assert known_projects.present(dirs) == (kept / ".sandbridge",)
    [line] = [r.getMessage() for r in caplog.records if "known_projects" in r.getMessage()]
    assert line.startswith("known_projects.skipped")
    assert str(gone / ".sandbridge") in line


def test_a_project_moved_behind_a_link_since_the_list_was_read_is_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A backend lays a view wherever the links on its path lead: one put there after the
    list was read (``mv b b-real; ln -s b-real b``) is never followed."""
    root = project(tmp_path / "code" / "b")
    known_projects.remember(root)
    dirs = tuple(known_projects.policy_dirs())
    root.rename(tmp_path / "code" / "b-real")
    root.symlink_to("b-real")
    with caplog.at_level(logging.INFO, logger="sandbridge"):
        assert known_projects.present(dirs) == ()
    assert str(root / ".sandbridge") in caplog.text
