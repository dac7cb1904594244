"""What a session's end names: what the sandbox left in its writable mounts that no mount
could stop and the owner's tools would obey unseen (:meth:`Protection.finish`).

Each function compares what the start recorded with what is there now and returns one
warning per finding; the caller shows them escaped (the names are the sandbox's to
choose).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from sandbridge.exceptions import GitNotRun
from sandbridge.sandbox import host_git
from sandbridge.sandbox.project import POLICY_DIR
from sandbridge.sandbox.repositories import (
    is_bare_git_dir,
    nested_repositories_and_policy_dirs,
)

# How many files one warning names; the rest is "...".
MAX_NAMED_FILES = 5

# What the index of each work tree says now, or why git could not say.
Index = dict[Path, host_git.IndexFacts | GitNotRun]


def policy_dir_replaced(project_root: Path | None, held_fd: int | None) -> list[str]:
    """The project's ``.sandbridge``, held open since the start as ``held_fd``, is no
    longer the directory at its path."""
    if held_fd is None or project_root is None:
        return []
    path = project_root / POLICY_DIR
    held = os.fstat(held_fd)
    try:
        now = os.lstat(path)
        same = (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)
    except OSError:
        same = False
    if same:
        return []
    return [
        f"WARNING: {path} was removed or renamed during the session: the sandbox's "
        "read-only view of it went with it, so the sandbox could read and write what "
        f"was put there since; review {path} before the next run"
    ]


def new_files(watched: Iterable[Path], reasons: dict[Path, str]) -> list[str]:
    """Deny-listed files that did not exist at the start and do now."""
    return [
        f"WARNING: the sandbox created {path} ({reasons[path]}): review it before your tools use it"
        for path in watched
        if path.exists() or path.is_symlink()
    ]


def index_now(tops: Iterable[Path], index_facts: Callable[[Path], host_git.IndexFacts]) -> Index:
    """What the index of each work tree in ``tops`` says now: one git for each."""
    index: Index = {}
    for top in tops:
        if top not in index:
            try:
                index[top] = index_facts(top)
            except GitNotRun as exc:
                index[top] = exc
    return index


def new_submodules(
    registered: dict[Path, frozenset[Path]], index: Index, ours: set[Path]
) -> list[str]:
    """Submodules registered since the start that have a git dir of their own (not one of
    ``ours``, the placeholders): the owner's git status runs their config."""
    warnings = []
    for top, before in registered.items():
        now = index[top]
        if isinstance(now, GitNotRun):
            warnings.append(
                f"WARNING: could not check whether the sandbox registered a submodule in "
                f"{top}: {now}"
            )
            continue
        for path in now.submodules:
            dot_git = path / ".git"
            if path not in before and os.path.lexists(dot_git) and dot_git not in ours:
                warnings.append(
                    f"WARNING: the sandbox registered a submodule at {path} with its own "
                    f"git dir; git status runs its config: inspect {path / '.git'}, or "
                    f"remove it with git rm --cached {path.relative_to(top)}"
                )
    return warnings


def new_hidden(hidden: dict[Path, frozenset[str]], index: Index) -> list[str]:
    """Index entries newly marked assume-unchanged or skip-worktree: their changes show in
    neither git status nor git diff."""
    warnings = []
    for top, before in hidden.items():
        now = index[top]
        if isinstance(now, GitNotRun):
            warnings.append(
                f"WARNING: could not check whether the sandbox hid files of {top} from "
                f"git status: {now}"
            )
            continue
        new = sorted(now.hidden - before)
        if new:
            named = " ".join(new[:MAX_NAMED_FILES]) + (" ..." if len(new) > MAX_NAMED_FILES else "")
            warnings.append(
                f"WARNING: the sandbox hid {len(new)} file(s) of {top} from git status "
                f"and git diff (assume-unchanged or skip-worktree): {named}; show them "
                "with git update-index --no-assume-unchanged --no-skip-worktree FILE"
            )
    return warnings


def nested_now(scan_roots: Iterable[Path]) -> tuple[set[Path], set[Path]]:
    """The repositories and policy directories in the writable mounts now (one walk)."""
    found = [nested_repositories_and_policy_dirs(root) for root in scan_roots]
    return {top for tops, _ in found for top in tops}, {d for _, dirs in found for d in dirs}


def new_repositories(found: set[Path], known: frozenset[Path], ours: set[Path]) -> list[str]:
    """Repositories that were not there at the start (an empty ``.git`` of ``ours``, a
    placeholder, is none): git run there obeys their config."""
    found = {top for top in found if top / ".git" not in ours}
    return [
        f"WARNING: the sandbox created a git repository at {top}: git run there obeys "
        f"its config; inspect {top if is_bare_git_dir(top) else top / '.git'} or "
        "remove it"
        for top in sorted(found - known)
    ]


def new_policy_dirs(found: set[Path], known: frozenset[Path], ours: set[Path]) -> list[str]:
    """Policy directories that were not there at the start and are not placeholders of
    ``ours``: a sandbridge run there obeys them."""
    return [
        f"WARNING: the sandbox created a sandbridge policy directory at {path}: a "
        "sandbridge run there obeys it; inspect it or remove it"
        for path in sorted(found - known - ours)
    ]
