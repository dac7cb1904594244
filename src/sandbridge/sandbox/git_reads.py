"""The files the host's git opens for sandbridge's questions, checked before git runs.

git opens what it reads with a plain ``open()``: a FIFO where it expects a file blocks it
there until a writer comes, which is never, and a device or socket is no file either (a
link to ``/dev/tty`` would read the owner's terminal). The sandbox can plant one in any
repository it can write, so each question would wait the whole timeout. These are the
files git 2.39 opens for the calls of ``host_git.py`` (found with ``strace -f -e
trace=openat`` on each), looked at with ``lstat`` (and ``stat`` for a link's target),
never opened, except the two small files git itself reads to find the git dir, which are
opened without blocking and only when they are regular files:

- finding the repository, from the directory git runs in up to ``/``: each directory's
  ``.git`` (a directory; or a file, read, naming one; anything else is refused), its
  ``HEAD`` and ``commondir``; where there is no ``.git``, the directory's own ``HEAD``
  and ``commondir`` (a bare repository's);
- in the git dir found: ``index`` (``ls-files``), ``config.worktree``, a split index's
  ``sharedindex.*`` and ``info/sparse-checkout`` (opened to read the index only when
  the repository uses them, which its own config and index decide); in its common dir
  (``commondir``): ``config``, ``info/exclude`` (``check-ignore``);
- the owner's own config and ignore files (``~/.gitconfig``, ``$XDG_CONFIG_HOME/git/``);
- ``check-ignore PATH`` (or ``--stdin`` with the paths on its input, ``check``'s
  ``asked``): the ``.gitignore`` of each directory from the top down to each PATH's;
- ``config -f FILE``: FILE.

Files that settings name (an ``include.path`` target, ``core.excludesFile``) are checked
by ``host_git.config_entries``, which reads the settings. Measured as not opened by these
calls (a FIFO there changes nothing): refs, loose or ``packed-refs``, the object store
(``objects/info/alternates`` too), ``shallow``, ``FETCH_HEAD``, ``info/sparse-checkout``.
A file all this misses is bounded by the timeout instead, once per repository
(``host_git.run_git``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sandbridge.exceptions import GitNotRun
from sandbridge.sandbox.repositories import first_line, path_value

# A split index's shared part (read-cache.c): ``sharedindex.<hash>`` in the git dir.
SHARED_INDEX_PREFIX = "sharedindex."
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


@dataclass(frozen=True, slots=True)
class Repository:
    """Where git finds the repository for a directory: its git dir and work tree top."""

    git_dir: Path
    top: Path | None  # None: a bare repository


def not_a_file(path: Path) -> str | None:
    """What ``path`` is when git would block or read without end opening it: a FIFO,
    socket or device, or a link to one; ``None`` for anything else (missing, a regular
    file, a directory, a dangling link: git fails at once on those)."""
    try:
        mode = os.lstat(path).st_mode
        link = stat.S_ISLNK(mode)
        if link:
            mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    for test, kind in _KINDS:
        if test(mode):
            return f"a symbolic link to {kind}" if link else kind
    return None


def refusal(path: Path, kind: str) -> GitNotRun:
    return GitNotRun(f"{path} is {kind}, not a file; git there would hang; not run. Remove it.")


def ensure_file(path: Path) -> None:
    """Raise :class:`GitNotRun` naming ``path`` if git would hang opening it."""
    kind = not_a_file(path)
    if kind is not None:
        raise refusal(path, kind)


def check(cwd: Path, args: Sequence[str], asked: Sequence[str] = ()) -> Repository | None:
    """Check every file git would open for ``git ARGS`` run in ``cwd``; return the
    repository it would find (``None``: none), or raise :class:`GitNotRun`.

    ``asked``: the paths a ``check-ignore --stdin`` reads from its input (without
    ``--stdin``, the path is the last argument)."""
    for path in _owner_files():
        ensure_file(path)
    repository = find(cwd)
    if repository is not None:
        git_dir = repository.git_dir
        common = _common_dir(git_dir)
        for path in (git_dir / "index", git_dir / "config.worktree", *_index_files(git_dir)):
            ensure_file(path)
        for path in (common / "config", common / "info" / "exclude"):
            ensure_file(path)
        if "check-ignore" in args and repository.top is not None:
            for asked_path in asked if "--stdin" in args else args[-1:]:
                for directory in _directories_down_to(repository.top, cwd / asked_path):
                    ensure_file(directory / ".gitignore")
    if "-f" in args[:-1]:
        ensure_file(cwd / args[list(args).index("-f") + 1])
    return repository


def find(cwd: Path) -> Repository | None:
    """The repository git's discovery finds from ``cwd``, every file it opens on the way
    checked (``setup.c``: a ``.git`` in each directory upwards, else a bare one)."""
    directory = Path(os.path.abspath(cwd))
    for candidate in (directory, *directory.parents):
        dot_git = candidate / ".git"
        if os.path.lexists(dot_git):
            ensure_file(dot_git)
            if dot_git.is_dir():
                git_dir = dot_git
            elif dot_git.is_file():
                line = first_line(dot_git)
                named = path_value(line.removeprefix("gitdir:").strip(), candidate)
                if not line.startswith("gitdir:") or named is None:
                    continue  # git refuses this .git file; nothing of it is opened
                git_dir = named
            else:
                continue  # a dangling link: no repository here for git either
            _check_git_dir(git_dir)
            return Repository(git_dir, candidate)
        head = candidate / "HEAD"
        if os.path.lexists(head):
            _check_git_dir(candidate)
            if (candidate / "objects").is_dir() and (candidate / "refs").is_dir():
                return Repository(candidate, None)
    return None


def _check_git_dir(git_dir: Path) -> None:
    ensure_file(git_dir / "HEAD")
    ensure_file(git_dir / "commondir")


def _index_files(git_dir: Path) -> list[Path]:
    """Files git opens to read the index only in some repositories, both the sandbox's
    doing: a split index's ``sharedindex.<hash>`` beside ``index`` (``update-index
    --split-index``; every one there is checked, not only the one ``index`` names) and,
    when the repository's config turns on sparse checkout, ``info/sparse-checkout``."""
    found = [git_dir / "info" / "sparse-checkout"]
    try:
        with os.scandir(git_dir) as entries:
            found += [Path(e.path) for e in entries if e.name.startswith(SHARED_INDEX_PREFIX)]
    except OSError:
        pass  # not a directory git can read either: it fails at once
    return found


def _common_dir(git_dir: Path) -> Path:
    """Where ``commondir`` points (read without blocking), else the git dir itself."""
    common = git_dir / "commondir"
    if not common.is_file():
        return git_dir
    return path_value(first_line(common), git_dir) or git_dir


def _owner_files() -> list[Path]:
    home = os.environ.get("HOME", "")
    xdg = os.environ.get("XDG_CONFIG_HOME") or (os.path.join(home, ".config") if home else "")
    found = [Path(home) / ".gitconfig"] if home else []
    if xdg:
        found += [Path(xdg) / "git" / "config", Path(xdg) / "git" / "ignore"]
    return found


def _directories_down_to(top: Path, path: Path) -> list[Path]:
    """``top`` and each directory below it on the way to ``path`` (lexically)."""
    target = Path(os.path.normpath(path))
    if not target.is_relative_to(top):
        return [top]
    found = [top]
    for part in target.relative_to(top).parts[:-1]:
        found.append(found[-1] / part)
    return found
