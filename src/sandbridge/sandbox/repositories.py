"""Where git keeps what it obeys: the git dirs in a mount, found by reading files only
(a ``.git`` file's ``gitdir:``, ``commondir``, submodules' git dirs, bare repositories),
never by running git on what the sandbox wrote."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

# How far below a writable mount sandbridge looks for other repositories (vendored
# checkouts, nested projects) whose git dirs need the same protection as the project's,
# and how many directories it reads at most doing so: enough for a project's layout,
# bounded for a home directory or a huge tree.
NESTED_REPO_DEPTH = 4
MAX_SCANNED_DIRS = 20_000
# Directories never searched for nested repositories: big, generated, never a checkout
# the owner runs git in (a git dir's own insides are protected as a git dir).
UNSCANNED_DIRS = frozenset({".git", "node_modules", ".venv", "__pycache__", "target"})


def path_value(value: str, base: Path) -> Path | None:
    if not value or "\0" in value:
        return None
    path = Path(os.path.expanduser(value))
    return (path if path.is_absolute() else base / path).resolve()


def first_line(path: Path) -> str:
    """The first line of a small file git reads (a ``.git`` file, ``commondir``); "" for
    anything but a regular file: opened without blocking, so a FIFO the sandbox put
    there (or swapped in after a check) cannot hold sandbridge in ``open()``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        data = os.read(fd, 4096)
    except OSError:
        return ""
    finally:
        os.close(fd)
    return data.decode("utf-8", errors="replace").partition("\n")[0].strip()


def gitdir_of(dot_git_file: Path) -> Path | None:
    line = first_line(dot_git_file)
    if not line.startswith("gitdir:"):
        return None
    return path_value(line.removeprefix("gitdir:").strip(), dot_git_file.parent)


def git_dirs_below(modules: Path) -> Iterable[Path]:
    """Submodule git dirs under ``modules`` (names may hold slashes: nested dirs)."""
    if not modules.is_dir() or modules.is_symlink():
        return
    pending = [modules]
    while pending:
        directory = pending.pop()
        for child in sorted(directory.iterdir()):
            if child.is_symlink() or not child.is_dir():
                continue
            if (child / "HEAD").exists():
                yield child
            else:
                pending.append(child)


def is_bare_git_dir(directory: Path) -> bool:
    """What git takes for a git dir when run inside it (``HEAD``, ``objects/``, ``refs/``):
    a "bare repository" whose config git obeys (CVE-2022-24765's class). A directory the
    owner cannot look into is not one their git would use."""
    try:
        return (
            (directory / "HEAD").is_file()
            and (directory / "objects").is_dir()
            and (directory / "refs").is_dir()
        )
    except OSError:
        return False


def nested_repositories_and_policy_dirs(source: Path) -> tuple[list[Path], list[Path]]:
    """Directories at or below ``source`` with a ``.git`` or that are bare git dirs, and
    the ``.sandbridge`` entries there (each makes its directory a project root of its own
    for a ``sandbridge run`` there outside git), within the scan's bounds: one walk for
    both, as a start and an end each ask both."""
    repositories, holding = _nested(source, (_is_repository, _holds_policy))
    return repositories, [directory / ".sandbridge" for directory in holding]


def _is_repository(directory: Path) -> bool:
    return os.path.lexists(directory / ".git") or is_bare_git_dir(directory)


def _holds_policy(directory: Path) -> bool:
    return os.path.lexists(directory / ".sandbridge")


def _nested(source: Path, wanted: tuple[Callable[[Path], bool], ...]) -> tuple[list[Path], ...]:
    """For each of ``wanted``, the directories at or below ``source`` it holds for."""
    found: tuple[list[Path], ...] = tuple([] for _ in wanted)
    level = [source]
    scanned = 0
    for _ in range(NESTED_REPO_DEPTH + 1):
        following = []
        for directory in level:
            scanned += 1
            if scanned > MAX_SCANNED_DIRS:
                return found
            for holds, found_by in zip(wanted, found, strict=True):
                if holds(directory):  # no raise
                    found_by.append(directory)
            try:
                children = list(os.scandir(directory))
            except OSError:
                continue
            for child in children:
                if child.name not in UNSCANNED_DIRS and child.is_dir(follow_symlinks=False):
                    following.append(Path(child.path))
        level = following
    return found
