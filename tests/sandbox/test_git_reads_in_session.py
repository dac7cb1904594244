"""Files that would make the host's git hang, in real ``sandbridge run`` sessions (both
backends): planted before a session, they stop its start at once, named; planted by the
sandbox, the session's end still comes at once, and each end-of-session check that could
not ask git says so (naming the file) instead of finding nothing."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from sandbridge.sandbox.host_git import GIT_TIMEOUT_SECONDS
from tests.sandbox.test_protected_paths import git, inside, make_repo

# A session's start and end take a second or two here; a git that hung would add the
# whole timeout. Half of it tells the two apart on a loaded machine.
PROMPT = GIT_TIMEOUT_SECONDS / 2


@pytest.fixture(autouse=True)
def _private_runtime_base(xdg: Path) -> Path:
    return xdg


def refused(path: Path) -> str:
    return f"{path} is a FIFO, not a file; git there would hang; not run. Remove it."


def timed(
    backend: str, workdir: Path, script: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = inside(backend, workdir, script)
    return result, time.monotonic() - started


def with_secrets_file(root: Path, ignored: bool) -> None:
    (root / ".sandbridge").mkdir()
    (root / ".sandbridge" / "env").write_text("API_TOKEN=x\n")
    (root / ".sandbridge" / "env").chmod(0o600)
    if ignored:
        (root / ".gitignore").write_text("/.sandbridge/env\n")


# .cargo/.gitignore: git reads it to tell whether .cargo/config.toml (deny-listed, missing)
# is ignored, which decides whether it gets a placeholder.
@pytest.mark.parametrize("planted", [".git/index", ".git/HEAD", ".gitignore", ".cargo/.gitignore"])
def test_a_fifo_planted_before_the_start_stops_it_at_once_naming_it(
    backend: str, tmp_path: Path, planted: str
) -> None:
    repo = make_repo(tmp_path / "proj")
    (repo / ".cargo").mkdir()
    path = repo / planted
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    result, took = timed(backend, repo, f"touch {tmp_path}/ran")
    assert result.returncode == 2, result.stderr
    assert f"sandbridge: {refused(path)}\n" in result.stderr
    assert not (tmp_path / "ran").exists()
    assert took < PROMPT


def test_a_fifo_named_dot_git_stops_the_start_at_once(backend: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    os.mkfifo(work / ".git")
    result, took = timed(backend, work, "true")
    assert result.returncode == 2, result.stderr
    assert f"sandbridge: {refused(work / '.git')}\n" in result.stderr
    assert took < PROMPT


@pytest.mark.parametrize("planted", [".git/index", ".git/HEAD"])
def test_a_fifo_the_sandbox_plants_in_the_git_dir_is_named_at_an_end_that_comes_at_once(
    backend: str, tmp_path: Path, planted: str
) -> None:
    repo = make_repo(tmp_path / "proj")
    result, took = timed(backend, repo, f"rm {planted} && mkfifo {planted}")
    assert result.returncode == 0, result.stderr
    assert took < PROMPT
    assert (
        f"sandbridge: WARNING: could not check whether the sandbox registered a submodule in "
        f"{repo}: {refused(repo / planted)}\n"
    ) in result.stderr
    assert (
        f"sandbridge: WARNING: could not check whether the sandbox hid files of {repo} from "
        f"git status: {refused(repo / planted)}\n"
    ) in result.stderr


def test_a_gitignore_fifo_the_sandbox_plants_leaves_the_secrets_file_unchecked_and_said(
    backend: str, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "proj")
    with_secrets_file(repo, ignored=True)
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore")
    result, took = timed(backend, repo, "rm .gitignore && mkfifo .gitignore")
    assert result.returncode == 0, result.stderr
    assert took < PROMPT
    assert (
        f"sandbridge: WARNING: could not check whether git ignores {repo / '.sandbridge/env'}: "
        f"{refused(repo / '.gitignore')} Until then, take it that `git add -A` would commit "
        "its values\n"
    ) in result.stderr


def test_a_dot_git_fifo_the_sandbox_plants_is_named_and_the_secrets_file_unchecked(
    backend: str, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with_secrets_file(work, ignored=False)
    result, took = timed(backend, work, "mkfifo .git")
    assert result.returncode == 0, result.stderr
    assert took < PROMPT
    assert f"sandbridge: WARNING: the sandbox created a git repository at {work}" in result.stderr
    assert (
        f"sandbridge: WARNING: could not check whether git ignores {work / '.sandbridge/env'}: "
        f"{refused(work / '.git')}"
    ) in result.stderr


def test_a_fifo_among_the_refs_changes_nothing_at_either_end(backend: str, tmp_path: Path) -> None:
    """git 2.39 opens no ref for sandbridge's questions (strace): nothing to refuse."""
    repo = make_repo(tmp_path / "proj")
    os.mkfifo(repo / ".git" / "refs" / "heads" / "before")
    result, took = timed(backend, repo, "mkfifo .git/refs/heads/during .git/packed-refs")
    assert result.returncode == 0, result.stderr
    assert took < PROMPT
    assert "could not check" not in result.stderr
    assert "hang" not in result.stderr
