"""sandbridge's own questions to the host git (sandbox/host_git.py): never run project code."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from sandbridge.exceptions import GitNotRun
from sandbridge.sandbox import host_git
from tests.sandbox.test_protected_paths import git, make_repo


def test_questions_never_run_the_projects_configured_commands(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "proj")
    marker = tmp_path / "ran"
    script = tmp_path / "hook.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    git(repo, "config", "core.fsmonitor", str(script))
    git(repo, "config", "core.pager", str(script))
    git(repo, "config", "core.hooksPath", str(tmp_path))
    (tmp_path / "post-index-change").write_text(script.read_text())
    (tmp_path / "post-index-change").chmod(0o755)
    assert host_git.toplevel(repo / ".git" / "..") == repo
    assert any(e.key == "core.fsmonitor" for e in host_git.config_entries(repo))
    assert host_git.submodule_paths(repo) == []
    assert host_git.ignoring_rule(repo, "README") is None
    assert host_git.hidden_from_status(repo) == frozenset()
    assert not marker.exists()
    git(repo, "status")  # the owner's git does run it: the test's set-up is live
    assert marker.exists()


def test_toplevel_outside_every_repository_answers_without_running_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``.git`` upwards and no bare repository: git's own discovery would find nothing,
    so no git process is started (a run's start waited for one); inside a repository, and
    through a link into one, git is asked and answers as before."""
    repo = make_repo(tmp_path / "proj")  # with the owner's git, before the one counted
    (repo / "sub").mkdir()
    runs = tmp_path / "git-runs"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    real_git = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True)
    wrapper.write_text(f'#!/bin/sh\necho "$PWD" >> {runs}\nexec {real_git.stdout.strip()} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    plain = tmp_path / "plain" / "deep"
    plain.mkdir(parents=True)
    assert host_git.toplevel(plain) is None
    assert not runs.exists()
    (tmp_path / "plain" / "link").symlink_to(repo / "sub")
    assert host_git.toplevel(tmp_path / "plain" / "link") == repo
    assert host_git.toplevel(repo / "sub") == repo
    assert runs.read_text().count("\n") == 2


def test_a_repository_of_another_user_is_read_all_the_same(tmp_path: Path) -> None:
    assert os.getuid() == 0, "this test hands the repository to another user: run as root"
    repo = make_repo(tmp_path / "proj")
    git(repo, "config", "core.hooksPath", ".husky/_")
    subprocess.run(["chown", "-R", "65534:65534", str(repo)], check=True)
    assert host_git.toplevel(repo) == repo
    entries = host_git.config_entries(repo)
    assert any(e.key == "core.hookspath" and e.value == ".husky/_" for e in entries)


def test_ignoring_rule_names_source_and_line_and_skips_negations(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "proj")
    (repo / ".gitignore").write_text("*.log\n!keep.log\n")
    assert host_git.ignoring_rule(repo, "a.log") == ".gitignore:1:*.log"
    assert host_git.ignoring_rule(repo, "keep.log") is None


def test_a_repository_where_git_timed_out_is_not_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file the checks do not foresee (a ref: none of sandbridge's questions opens one,
    but ``git show`` does) costs the timeout once; the next question fails at once."""
    monkeypatch.setattr(host_git, "GIT_TIMEOUT_SECONDS", 1.0)
    repo = make_repo(tmp_path / "proj")
    (repo / ".git" / "refs" / "heads" / "main").unlink()
    os.mkfifo(repo / ".git" / "refs" / "heads" / "main")
    started = time.monotonic()
    with pytest.raises(GitNotRun) as first:
        host_git.run_git(repo, "show", "main:README")
    assert 1.0 <= time.monotonic() - started < 10
    assert str(first.value) == (
        f"git timed out after 1 s in the repository {repo} (git show main:README): a file "
        "there blocks it (a FIFO?); not asked again in this run. Find it and remove it."
    )
    started = time.monotonic()
    for question in (host_git.toplevel, host_git.hidden_from_status, host_git.config_entries):
        with pytest.raises(GitNotRun) as again:
            question(repo)
        assert str(again.value) == str(first.value)
    assert time.monotonic() - started < 0.5


def test_an_include_git_would_follow_into_a_fifo_is_refused_naming_it(tmp_path: Path) -> None:
    """Only ``config --includes`` opens included files: each is checked first, to any
    depth, whatever its condition."""
    repo = make_repo(tmp_path / "proj")
    (repo / "first").write_text("[include]\n\tpath = deeper/second\n")
    (repo / "deeper").mkdir()
    os.mkfifo(repo / "deeper" / "second")
    git(repo, "config", "includeIf.onbranch:nothing.path", "../first")
    started = time.monotonic()
    with pytest.raises(GitNotRun) as caught:
        host_git.config_entries(repo)
    assert str(caught.value) == (
        f"{repo / 'deeper' / 'second'} is a FIFO, not a file; git there would hang; not run. "
        "Remove it."
    )
    assert time.monotonic() - started < host_git.GIT_TIMEOUT_SECONDS / 4


def test_an_excludes_file_a_setting_names_is_checked(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "proj")
    os.mkfifo(repo / "excludes")
    git(repo, "config", "core.excludesFile", "excludes")
    with pytest.raises(GitNotRun, match="excludes is a FIFO, not a file"):
        host_git.config_entries(repo)


def test_includes_are_still_listed_with_their_files(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "proj")
    (repo / "extra").write_text("[alias]\n\tx = status\n")
    git(repo, "config", "include.path", "../extra")
    entries = host_git.config_entries(repo)
    assert host_git.ConfigEntry(repo / "extra", "alias.x", "status") in entries


def test_names_that_are_not_utf8_or_hold_a_cr_are_read_as_they_are(tmp_path: Path) -> None:
    """The index's names are the sandbox's to choose: one that is not UTF-8 made git's
    answer undecodable (a ``UnicodeDecodeError`` out of the session's end, before its
    other warnings were said), and a CR was read as a LF (the name shown was not the
    file's)."""
    repo = make_repo(tmp_path / "proj")
    names = [os.fsdecode(b"bad\xffname"), "cr\rname"]
    for name in names:
        (repo / name).write_text("x\n")
        git(repo, "add", "--", name)
        git(repo, "update-index", "--assume-unchanged", "--", name)
    assert host_git.hidden_from_status(repo) == frozenset(names)
