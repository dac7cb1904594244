"""The files the host's git opens, checked before it runs (sandbox/git_reads.py): real git,
real FIFOs and sockets. A file git would block on is refused, naming it, before git
starts; a FIFO where git 2.39 opens nothing for sandbridge's questions changes nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbridge.exceptions import GitNotRun
from sandbridge.sandbox import git_reads, host_git
from tests.sandbox.test_protected_paths import git, make_repo

# Well within the timeout: a refusal is an lstat or two, never a wait.
PROMPT = host_git.GIT_TIMEOUT_SECONDS / 4


def refused(path: Path, kind: str = "a FIFO") -> str:
    return f"{path} is {kind}, not a file; git there would hang; not run. Remove it."


def fifo_in_place_of(path: Path) -> Path:
    if path.is_dir() and not path.is_symlink():
        subprocess.run(["rm", "-rf", str(path)], check=True)
    elif os.path.lexists(path):
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def index(repo: Path) -> Path:
    return fifo_in_place_of(repo / ".git" / "index")


def head(repo: Path) -> Path:
    return fifo_in_place_of(repo / ".git" / "HEAD")


def dot_git(repo: Path) -> Path:
    return fifo_in_place_of(repo / ".git")


def config(repo: Path) -> Path:
    return fifo_in_place_of(repo / ".git" / "config")


def commondir(repo: Path) -> Path:
    return fifo_in_place_of(repo / ".git" / "commondir")


def info_exclude(repo: Path) -> Path:
    return fifo_in_place_of(repo / ".git" / "info" / "exclude")


def gitignore_on_the_way(repo: Path) -> Path:
    return fifo_in_place_of(repo / "src" / ".gitignore")


def index_linked_to_a_fifo(repo: Path) -> Path:
    target = fifo_in_place_of(repo.parent / "elsewhere")
    (repo / ".git" / "index").unlink()
    (repo / ".git" / "index").symlink_to(target)
    return repo / ".git" / "index"


def head_of_a_git_dir_a_git_file_names(repo: Path) -> Path:
    moved = repo.parent / "moved-git-dir"
    (repo / ".git").rename(moved)
    (repo / ".git").write_text(f"gitdir: {moved}\n")
    return fifo_in_place_of(moved / "HEAD")


PLANTED: list[Callable[[Path], Path]] = [
    index,
    head,
    dot_git,
    config,
    commondir,
    info_exclude,
    gitignore_on_the_way,
    index_linked_to_a_fifo,
    head_of_a_git_dir_a_git_file_names,
]
QUESTIONS: dict[str, Callable[[Path], object]] = {
    "toplevel": host_git.toplevel,
    "index_facts": host_git.index_facts,
    "ignoring_rule": lambda repo: host_git.ignoring_rule(repo, "src/app/.envrc"),
}


@pytest.mark.parametrize("plant", PLANTED, ids=lambda plant: plant.__name__)
def test_a_file_git_would_block_on_is_refused_naming_it(
    tmp_path: Path, plant: Callable[[Path], Path]
) -> None:
    repo = make_repo(tmp_path / "proj")
    (repo / "src").mkdir()
    path = plant(repo)
    asked = ["ignoring_rule"] if plant is gitignore_on_the_way else list(QUESTIONS)
    kind = "a symbolic link to a FIFO" if path.is_symlink() else "a FIFO"
    for name in asked:
        started = time.monotonic()
        with pytest.raises(GitNotRun) as caught:
            QUESTIONS[name](repo)
        assert str(caught.value) == refused(path, kind), name
        assert time.monotonic() - started < PROMPT


def test_a_bare_repositorys_head_on_the_way_up_is_refused(tmp_path: Path) -> None:
    """No ``.git``: git takes a directory holding ``HEAD`` for a bare repository, and opens
    that ``HEAD``, in each directory from where it runs up to ``/``."""
    work = tmp_path / "work" / "sub"
    work.mkdir(parents=True)
    os.mkfifo(tmp_path / "work" / "HEAD")
    with pytest.raises(GitNotRun, match="^" + refused(tmp_path / "work" / "HEAD") + "$"):
        host_git.toplevel(work)


def test_a_socket_in_place_of_the_index_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "proj")
    (repo / ".git" / "index").unlink()
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(repo / ".git" / "index"))
        with pytest.raises(GitNotRun) as caught:
            host_git.index_facts(repo)
    assert str(caught.value) == refused(repo / ".git" / "index", "a socket")


def test_a_gitmodules_read_with_config_f_is_checked(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "proj")
    os.mkfifo(repo / ".gitmodules")
    with pytest.raises(GitNotRun, match="gitmodules is a FIFO"):
        host_git.run_git(repo, "config", "-f", ".gitmodules", "--list")


def ref(repo: Path) -> Path:
    return fifo_in_place_of(repo / ".git" / "refs" / "heads" / "planted")


def packed_refs(repo: Path) -> Path:
    return fifo_in_place_of(repo / ".git" / "packed-refs")


def alternates(repo: Path) -> Path:
    return fifo_in_place_of(repo / ".git" / "objects" / "info" / "alternates")


def shallow(repo: Path) -> Path:
    return fifo_in_place_of(repo / ".git" / "shallow")


@pytest.mark.parametrize("plant", [ref, packed_refs, alternates, shallow], ids=lambda p: p.__name__)
def test_a_fifo_where_git_opens_nothing_for_these_questions_changes_nothing(
    tmp_path: Path, plant: Callable[[Path], Path]
) -> None:
    """Measured (strace) with git 2.39: none of sandbridge's questions opens these."""
    repo = make_repo(tmp_path / "proj")
    git(repo, "update-index", "--assume-unchanged", "README")
    plant(repo)
    started = time.monotonic()
    assert host_git.toplevel(repo) == repo
    assert host_git.index_facts(repo).hidden == frozenset({"README"})
    assert host_git.index_facts(repo).submodules == []
    assert host_git.ignoring_rule(repo, ".envrc") is None
    assert time.monotonic() - started < PROMPT


def test_what_each_kind_of_file_is_called(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_text("x")
    (tmp_path / "to-fifo").symlink_to(tmp_path / "fifo")
    (tmp_path / "to-tty").symlink_to("/dev/tty")
    (tmp_path / "to-file").symlink_to(tmp_path / "file")
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    assert git_reads.not_a_file(tmp_path / "fifo") == "a FIFO"
    assert git_reads.not_a_file(tmp_path / "to-fifo") == "a symbolic link to a FIFO"
    assert git_reads.not_a_file(tmp_path / "to-tty") == "a symbolic link to a character device"
    for harmless in ("file", "to-file", "dangling", "nothing"):
        assert git_reads.not_a_file(tmp_path / harmless) is None, harmless
    assert git_reads.not_a_file(tmp_path) is None


def test_the_repository_found_is_the_one_git_finds(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "proj")
    (repo / "src" / "deep").mkdir(parents=True)
    found = git_reads.check(repo / "src" / "deep", ("rev-parse", "--show-toplevel"))
    assert found == git_reads.Repository(repo / ".git", repo)


def shared_index(repo: Path) -> Path:
    """A split index (``git update-index --split-index``, which the sandbox may run in
    its workdir): ``index`` names ``sharedindex.<hash>``, which git opens beside it."""
    git(repo, "update-index", "--split-index")
    [shared] = (repo / ".git").glob("sharedindex.*")
    return fifo_in_place_of(shared)


def sparse_checkout_file(repo: Path) -> Path:
    """The repository's own config (the sandbox's to write) turns on sparse checkout:
    git then opens ``info/sparse-checkout`` to read the index."""
    git(repo, "config", "core.sparseCheckout", "true")
    return fifo_in_place_of(repo / ".git" / "info" / "sparse-checkout")


@pytest.mark.parametrize("plant", [shared_index, sparse_checkout_file], ids=lambda p: p.__name__)
def test_a_file_the_index_or_the_repositorys_settings_lead_git_to_is_refused(
    tmp_path: Path, plant: Callable[[Path], Path]
) -> None:
    """Files git 2.39 opens to read the index only in some repositories (found with
    strace on ``ls-files``): each question that reads the index is refused at once,
    naming the file, where it waited the whole timeout."""
    repo = make_repo(tmp_path / "proj")
    path = plant(repo)
    for question in (host_git.index_facts,):
        started = time.monotonic()
        with pytest.raises(GitNotRun) as caught:
            question(repo)
        assert str(caught.value) == refused(path), question.__name__
        assert time.monotonic() - started < PROMPT


def test_a_sparse_index_is_read_as_it_is_never_expanded_from_the_object_store(
    tmp_path: Path,
) -> None:
    """A sparse index (sparse checkout in cone mode with ``index.sparse``: the sandbox's
    own config and index) holds a directory out of the cone as one entry; git expanded
    it by reading its tree from the object store, where a FIFO in place of that loose
    object held each question the whole timeout. The questions read the index as it is
    (``ls-files --sparse``): the directory is one skip-worktree entry, nothing is read
    from the object store."""
    repo = make_repo(tmp_path / "proj")
    for name in ("in", "out"):
        (repo / name).mkdir()
        (repo / name / "file").write_text(f"{name}\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "two directories")
    git(repo, "sparse-checkout", "set", "--cone", "in")
    git(repo, "config", "index.sparse", "true")
    git(repo, "sparse-checkout", "reapply")
    tree = git(repo, "rev-parse", "HEAD:out").stdout.strip()
    fifo_in_place_of(repo / ".git" / "objects" / tree[:2] / tree[2:])
    started = time.monotonic()
    assert host_git.index_facts(repo).hidden == frozenset({"out/"})
    assert host_git.index_facts(repo).submodules == []
    assert time.monotonic() - started < PROMPT
