"""A Unix socket's path short enough to bind or connect to, whatever its directory."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def short_path(path: Path) -> Iterator[Path]:
    """``path`` reached through a descriptor of its directory (``/proc/self/fd/N/name``):
    Unix socket paths are limited to 108 bytes, and a deep ``$XDG_RUNTIME_DIR`` (or a
    test's temporary dir) exceeds that."""
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield Path(f"/proc/self/fd/{fd}") / path.name
    finally:
        os.close(fd)
