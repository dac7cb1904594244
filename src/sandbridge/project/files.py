"""The files of a project's ``.sandbridge``, read as the host reads them: never through
a link (the file's, or ``.sandbridge``'s own, swapped in at any moment), never from a
FIFO or a device, never past a limit."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from sandbridge.exceptions import PolicyError
from sandbridge.project.held_folder import FILE_FLAGS, HeldFolder

# The errors of a folder's open that say it is a link or no folder at all.
_NOT_A_FOLDER = (errno.ELOOP, errno.ENOTDIR)


def _check_regular(label: str, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise PolicyError(f"{label}: not a regular file; make it a plain file")


def read_project_file(
    path: Path,
    label: str,
    limit: int,
    check: Callable[[str, os.stat_result], None] = _check_regular,
) -> bytes | None:
    """The bytes of a project's ``.sandbridge`` file (``None`` if it does not exist), at
    most ``limit``; ``check`` judges what the open descriptor is. Never through a link,
    nor from a FIFO or a device: a repository can carry a `.sandbridge/allow` that links
    to any file the owner can read, and a parse error would print its first line.

    The folder is held by its descriptor (:mod:`sandbridge.project.held_folder`): a
    sandbox that swaps ``.sandbridge`` for a link to another project's, after the
    session's check of it, has it refused here, never read through."""
    try:
        folder = HeldFolder.open(path.parent)
    except OSError as exc:
        if exc.errno in _NOT_A_FOLDER:
            raise PolicyError(
                f"{label}: cannot read: {path.parent} is a symbolic link or not a directory; "
                "make it a directory"
            ) from None
        raise PolicyError(f"{label}: cannot read {path.parent}: {exc.strerror}") from None
    if folder is None:
        return None
    with folder:
        try:
            fd = os.open(path.name, os.O_RDONLY | FILE_FLAGS, dir_fd=folder.fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise PolicyError(f"{label}: a symbolic link; make it a plain file") from None
            raise PolicyError(f"{label}: cannot read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        check(label, os.fstat(fd))
        raw = file.read(limit + 1)
    if len(raw) > limit:
        raise PolicyError(f"{label}: larger than {limit} bytes")
    return raw
