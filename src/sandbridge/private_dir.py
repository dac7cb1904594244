"""Directories only this user may use: the runtime dir, session state, keys, journals."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

from sandbridge.exceptions import SandbridgeError

# Builds the error to raise from its one-line message (an exception class will do).
ErrorFactory = Callable[[str], SandbridgeError]


# The system's own directories, and those every user shares: a ``chmod 700`` of one (as
# root, who owns them) breaks every other program of the machine, so it is never advised.
SYSTEM_DIRS = frozenset(
    Path(p)
    for p in (
        "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
        "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp",
        "/usr", "/var", "/run/user", "/dev/shm",
    )
)  # fmt: skip
# Their children are the system's too (/usr/lib, /var/tmp, /etc/ssh).
SYSTEM_PARENTS = frozenset(Path(p) for p in ("/", "/etc", "/usr", "/var", "/usr/local"))


def is_system_dir(path: Path, mode: int) -> bool:
    """Whether ``path`` (of mode ``mode``) is a directory of the system or one that users
    share: one of :data:`SYSTEM_DIRS`, a child of :data:`SYSTEM_PARENTS` (a top-level
    one is a child of ``/``), or a sticky one (``/tmp``'s kind, written by everyone)."""
    path = Path(os.path.realpath(path))
    return path in SYSTEM_DIRS or path.parent in SYSTEM_PARENTS or bool(mode & stat.S_ISVTX)


def require_private_dir(
    path: Path,
    what: str,
    error: ErrorFactory,
    instead: str = "choose another directory, a new one of your own",
) -> None:
    """Refuse ``path`` unless it is a real directory of this user that others cannot open.
    Its mode is said with ``chmod 700`` to run, unless it is a system directory
    (:func:`is_system_dir`): then ``instead``, what to do in its place."""
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise error(f"{what} {path} is not a directory")
    if info.st_uid != os.getuid():
        raise error(f"{what} {path} is owned by uid {info.st_uid}, not you")
    if info.st_mode & 0o077:
        mode = stat.S_IMODE(info.st_mode)
        if is_system_dir(path, info.st_mode):
            raise error(
                f"{what} {path} has mode {mode:o} and is a system directory, which others "
                f"must keep using (never chmod it); {instead}"
            )
        raise error(f"{what} {path} has mode {mode:o}; run chmod 700 on it")


def make_private_dir(path: Path, what: str, error: ErrorFactory) -> Path:
    """Create ``path`` 0700 if it is missing, then refuse it as :func:`require_private_dir` does."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    require_private_dir(path, what, error)
    return path
