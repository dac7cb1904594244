"""The host's own commands (``git``, ``bwrap``, ``unshare``, ``setpriv``, the browser),
found where no sandbox can write.

Threat: sandbridge ran them by name, found on the owner's ``PATH``. A ``PATH`` that names
a directory in the workdir (an activated virtualenv's ``proj/.venv/bin``, direnv's
``node_modules/.bin``), in a ``--bind``, or a relative one (``.``, an empty entry: the
working directory, which for sandbridge's git is the workdir) let the sandbox put a
``git`` there, and sandbridge's own git at the session's end ran it on the host, as the
owner, outside every namespace (and a ``bwrap`` there would have been the next start's).

Defence: a command is looked up by :func:`which` on the owner's ``PATH`` without its
relative entries and without every directory that lies, links followed, in a place a
sandbox of this process can write (:func:`distrust`: the workdir and each ``--bind``,
registered before the first command runs); a command that is a link into such a place
is passed over too. It is then run by its absolute path. The sandbox's own ``PATH`` is
the owner's, unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from sandbridge.exceptions import SandboxError
from sandbridge.path_within import is_within
from sandbridge.places.real_path import real_path

# Directories a sandbox of this process can write (real paths).
_distrusted: set[Path] = set()


def distrust(directories: Iterable[Path]) -> None:
    """Never run a host command found in ``directories`` (or below them)."""
    _distrusted.update(Path(real_path(directory)) for directory in directories)


def _writable_inside(path: str) -> bool:
    real = Path(real_path(path))
    return any(is_within(real, directory) for directory in _distrusted)


def search_path(path: str | None = None) -> list[str]:
    """The directories of ``path`` (default: this process's ``PATH``) a command may be
    taken from: absolute ones outside every distrusted place."""
    if path is None:
        path = os.environ.get("PATH", os.defpath)
    return [
        entry
        for entry in path.split(os.pathsep)
        if entry and os.path.isabs(entry) and not _writable_inside(entry)
    ]


def which(name: str, path: str | None = None) -> str | None:
    """The absolute path of the command ``name`` on :func:`search_path` (of ``path``,
    default this process's ``PATH``), or ``None``."""
    if os.sep in name:
        return None if _writable_inside(name) else name
    for directory in search_path(path):
        candidate = os.path.join(directory, name)
        if (
            os.path.isfile(candidate)
            and os.access(candidate, os.X_OK)
            and not _writable_inside(candidate)
        ):
            return candidate
    return None


def require(name: str) -> str:
    """:func:`which`, or a :class:`SandboxError` naming the command."""
    found = which(name)
    if found is None:
        raise SandboxError(
            f"{name}: not found on PATH outside the places the sandbox can write "
            "(relative entries and the workdir's and binds' directories are passed over)"
        )
    return found
