"""Where a session's policy comes from: the project root's ``.sandbridge/``, nowhere else.

The project root is the top of the git work tree that holds the workdir (as the owner's
git finds it), else the workdir itself. A ``.sandbridge`` anywhere between the workdir
and the root would be a second policy that review could overlook (the sandbox of an
earlier session may have written it), and a policy file the owner's git ignores would not
show in review at all: both are refused, with what to do, instead of being obeyed or
skipped silently.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sandbridge.exceptions import GitNotRun, PolicyError
from sandbridge.project.policy import ALLOW_FILE, CONFIG_FILE, SECRETS_FILE
from sandbridge.sandbox import host_git
from sandbridge.shown_text import shown

POLICY_DIR = ALLOW_FILE.parent
# What the sandbox may read in the policy directory: the policy itself (reviewed and
# committed) and init's list of names. Every other file there is the owner's and stays
# out of sight inside: the secrets file, the copies editors and people leave beside it
# (``env~``, ``.env.swp``, ``.env.un~``, ``#env#``, ``env.bak``), which hold its values,
# old ones too, and whatever the owner puts there during a session (SandboxSpec.policy_dir).
SHOWN_POLICY_FILES = frozenset({ALLOW_FILE.name, CONFIG_FILE.name, "env.example", ".gitignore"})


def project_root(workdir: Path) -> Path:
    """The git top level that contains ``workdir``, else ``workdir``.

    A top level without a ``.git`` of its own is refused: it comes from a repository's
    ``core.worktree`` (``git init; git config core.worktree ..`` is all a sandbox needs
    in a workdir that had no repository), and taking it would move the project, its
    policy, its secrets file and what ``policy init`` writes to any directory above."""
    return locate(workdir)[0]


def locate(workdir: Path) -> tuple[Path, bool]:
    """:func:`project_root`, and whether it is a git work tree's top (what :func:`check`
    asks): one question to git, where asking each apart took two or three."""
    top = host_git.toplevel(workdir)
    if top is None or not workdir.is_relative_to(top):
        return workdir, (workdir / ".git").exists()
    if not os.path.lexists(top / ".git"):
        found = host_git.run_git(workdir, "rev-parse", "--absolute-git-dir").stdout.strip()
        raise PolicyError(
            f"{workdir}: git puts its work tree at {top}, which has no .git of its own (the "
            f"repository {found or '?'} sets core.worktree); sandbridge does not take "
            f"{top} as the project: if the sandbox made that repository, remove it"
        )
    return top, True


def check(workdir: Path, root: Path, in_git: bool | None = None) -> None:
    """Refuse a policy directory below the root, and a root policy file git ignores.
    ``in_git``: whether the root is a git work tree's top, when :func:`locate` said."""
    directory = workdir
    while directory != root and directory.is_relative_to(root):
        stray = directory / POLICY_DIR
        if os.path.lexists(stray):
            raise PolicyError(
                f"{stray}: only the project root's policy is read ({root / POLICY_DIR}); "
                "move its settings there or remove it"
            )
        directory = directory.parent
    policy_dir = root / POLICY_DIR
    if policy_dir.is_symlink():
        raise PolicyError(f"{policy_dir}: is a symbolic link; make it a directory")
    if in_git is None:
        in_git = _in_git(root)
    if in_git:
        for name in (CONFIG_FILE, ALLOW_FILE):
            if not (root / name).exists():
                continue
            rule = host_git.ignoring_rule(root, str(name))
            if rule is not None:
                raise PolicyError(
                    # The rule is the project's .gitignore line: the sandbox's to write.
                    f"{root / name}: git ignores it ({shown(rule)}), so a change to it would not "
                    "show in review; remove that rule"
                )


def shown_policy_files(root: Path) -> tuple[str, ...]:
    """The names of :data:`SHOWN_POLICY_FILES` that are regular files in
    ``root/.sandbridge`` now (never a link, a FIFO or a directory), for the spec to show
    inside (:attr:`SandboxSpec.policy_files`); the directory is read through no link."""
    try:
        fd = os.open(root / POLICY_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ()  # none, or a link that check() refuses
    found = []
    try:
        for name in sorted(SHOWN_POLICY_FILES):
            try:
                mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISREG(mode):
                found.append(name)
    finally:
        os.close(fd)
    return tuple(found)


def _in_git(root: Path) -> bool:
    return (root / ".git").exists() or host_git.toplevel(root) == root


def secrets_file_ignored(root: Path) -> bool | None:
    """Whether the owner's git ignores ``.sandbridge/env`` at ``root`` (every ignore
    source and negation weighed, as ``git status`` would); ``None`` outside a git work
    tree or without git."""
    if not host_git.available() or not _in_git(root):
        return None
    return host_git.ignoring_rule(root, str(SECRETS_FILE)) is not None


def secrets_file_warning(root: Path) -> str | None:
    """A warning when a secrets file exists and the owner's git does not ignore it (one
    ``git add -A`` from being committed): at the start of a session, and at its end,
    since the sandbox may write ``.gitignore`` (a ``!/.sandbridge/env`` takes it back)."""
    if not os.path.lexists(root / SECRETS_FILE):
        return None
    try:
        ignored = secrets_file_ignored(root)
    except GitNotRun as exc:
        return (
            f"WARNING: could not check whether git ignores {root / SECRETS_FILE}: {exc} "
            "Until then, take it that `git add -A` would commit its values"
        )
    if ignored is not False:
        return None
    return (
        f"WARNING: git does not ignore {root / SECRETS_FILE}: `git add -A` would commit its "
        f"values; add the line /{SECRETS_FILE} at the end of {root / '.gitignore'} (if the "
        "sandbox changed .gitignore, review that change)"
    )


def check_secrets_file(root: Path) -> None:
    """Refuse a secrets file (``.sandbridge/env``) that git tracks: its values would be in
    the repository's history and in every clone. Asked of the hardened host git, which
    runs nothing of the project."""
    if not os.path.lexists(root / SECRETS_FILE):
        return
    if not host_git.available() or not _in_git(root):
        return
    result = host_git.run_git(root, "ls-files", "--error-unmatch", "--", str(SECRETS_FILE))
    if result.returncode not in (0, 1):
        # Not an answer (a corrupt index, which the sandbox can write, a stuck git):
        # "not tracked" would be a guess, and the check fails closed.
        why = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[0]
        raise PolicyError(
            f"{root / SECRETS_FILE}: cannot tell whether git tracks it (git ls-files: "
            f"{shown(why[:200])}); repair the repository (`git status` says what is wrong)"
        )
    if result.returncode == 0:
        raise PolicyError(
            f"{root / SECRETS_FILE}: git tracks it, so its values are in the repository; "
            f"untrack it with: git rm --cached {SECRETS_FILE} (and change every secret it "
            "held if it was ever pushed)"
        )
