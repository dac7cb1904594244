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


def require_private_dir(path: Path, what: str, error: ErrorFactory) -> None:
    """Refuse ``path`` unless it is a real directory of this user that others cannot open."""
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise error(f"{what} {path} is not a directory")
    if info.st_uid != os.getuid():
        raise error(f"{what} {path} is owned by uid {info.st_uid}, not you")
    if info.st_mode & 0o077:
        raise error(f"{what} {path} has mode {stat.S_IMODE(info.st_mode):o}; run chmod 700 on it")


def make_private_dir(path: Path, what: str, error: ErrorFactory) -> Path:
    """Create ``path`` 0700 if it is missing, then refuse it as :func:`require_private_dir` does."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    require_private_dir(path, what, error)
    return path
