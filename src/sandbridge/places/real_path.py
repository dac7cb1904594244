"""A path with every symbolic link resolved, asked of the kernel.

``os.path.realpath`` walks a path in Python, one ``lstat`` (and string work) per
component: a run's start asked it for each remembered project (places/known_projects.py),
twice, and for each entry of ``PATH`` per host command looked up (places/host_commands.py),
so the start grew with the projects the owner ever ran. Here the kernel resolves the path
once (``open`` with ``O_PATH``, which follows every link, the last one too, as
``realpath`` does) and says where it got to (``/proc/self/fd/N``'s link).
"""

from __future__ import annotations

import os


def real_path(path: str | os.PathLike[str]) -> str:
    """``os.path.realpath(path)`` for a ``path`` that exists; for one that does not (or
    cannot be opened, or without ``/proc``), ``os.path.realpath``'s own answer."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return os.path.realpath(path)
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)
    finally:
        os.close(fd)
