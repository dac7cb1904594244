"""Where the policy comes from (sandbox/project.py): the secrets file's tracking check,
asked of the hardened host git without running anything of the project."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbridge.exceptions import PolicyError
from sandbridge.sandbox.project import (
    check,
    check_secrets_file,
    project_root,
    shown_policy_files,
)
from tests.sandbox.test_protected_paths import git, make_repo


def secrets(repo: Path) -> Path:
    (repo / ".sandbridge").mkdir(exist_ok=True)
    path = repo / ".sandbridge" / "env"
    path.write_text("A=1\n")
    path.chmod(0o600)
    return path


def test_an_untracked_secrets_file_is_accepted(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "proj")
    secrets(repo)
    check_secrets_file(repo)


def test_a_tracked_secrets_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "proj")
    secrets(repo)
    git(repo, "add", "-f", ".sandbridge/env")
    with pytest.raises(PolicyError, match=r"git rm --cached \.sandbridge/env"):
        check_secrets_file(repo)


def test_asking_git_runs_none_of_the_projects_commands(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "proj")
    secrets(repo)
    marker = tmp_path / "ran"
    script = tmp_path / "fsmonitor.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    git(repo, "config", "core.fsmonitor", str(script))
    check_secrets_file(repo)
    assert not marker.exists()
    git(repo, "status")  # the owner's git does run it: the set-up is live
    assert marker.exists()


def test_outside_a_repository_nothing_is_asked(tmp_path: Path) -> None:
    secrets(tmp_path)
    check_secrets_file(tmp_path)


def test_a_git_that_cannot_answer_fails_closed(tmp_path: Path) -> None:
    # The index is the sandbox's to write: a corrupt one must not read as "untracked".
    repo = make_repo(tmp_path / "proj")
    secrets(repo)
    git(repo, "add", "-f", ".sandbridge/env")
    (repo / ".git" / "index").write_bytes(b"DIRC garbage planted by the sandbox")
    with pytest.raises(PolicyError, match=r"cannot tell whether git tracks it \(git ls-files: "):
        check_secrets_file(repo)


def test_a_work_tree_moved_above_by_core_worktree_is_refused(tmp_path: Path) -> None:
    # A repository the sandbox made in a workdir that had none, its work tree set to a
    # directory above: the project (its policy, what init writes) would move up there.
    workdir = tmp_path / "above" / "proj"
    workdir.mkdir(parents=True)
    git(workdir, "init", "-q")
    git(workdir, "config", "core.worktree", str(tmp_path / "above"))
    with pytest.raises(PolicyError) as refused:
        project_root(workdir)
    message = str(refused.value)
    assert f"git puts its work tree at {tmp_path / 'above'}, which has no .git" in message
    assert f"the repository {workdir / '.git'} sets core.worktree" in message


def test_worktrees_and_submodules_keep_their_top_level(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "proj")
    (repo / "sub").mkdir()
    assert project_root(repo / "sub") == repo
    git(repo, "worktree", "add", "-q", str(tmp_path / "wt"))
    assert project_root(tmp_path / "wt") == tmp_path / "wt"  # .git is a file there


def test_only_policy_files_that_are_regular_files_are_shown(tmp_path: Path) -> None:
    policy_dir = tmp_path / ".sandbridge"
    policy_dir.mkdir()
    (policy_dir / "config").write_text("net = none\n")
    (policy_dir / "env").write_text("A=1\n")  # the secrets file: never shown
    (policy_dir / "notes").write_text("x\n")
    (policy_dir / "allow").symlink_to(tmp_path / "elsewhere")
    os.mkfifo(policy_dir / ".gitignore")
    (policy_dir / "env.example").mkdir()
    assert shown_policy_files(tmp_path) == ("config",)
    assert shown_policy_files(tmp_path / "none") == ()


def test_an_ignoring_rule_is_named_escaped(tmp_path: Path) -> None:
    """The rule that ignores a policy file is a .gitignore line the sandbox may have
    written: an ESC in it (a pattern that still matches) reaches the terminal escaped."""
    repo = make_repo(tmp_path / "proj")
    (repo / ".sandbridge").mkdir()
    (repo / ".sandbridge" / "config").write_text("")
    (repo / ".gitignore").write_text(".sandbridge/[c\x1b]onfig\n")
    with pytest.raises(PolicyError) as refused:
        check(repo, repo, in_git=True)
    assert "\x1b" not in str(refused.value)
    assert ".gitignore:1:.sandbridge/[c\\x1b]onfig" in str(refused.value)
