"""A path sandbridge creates on the host so that it can be mounted read-only inside
(sandbox/protected_paths.py): a mount point needs a path to lie on, and one made by
sandbridge is removed at the session's end only while it is still what sandbridge made."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Placeholder:
    """A path sandbridge creates on the host so that it can be mounted read-only."""

    path: Path
    content: bytes | None  # None: an empty directory

    def create(self, siblings: Mapping[Path, Placeholder] | None = None) -> None:
        """Create it; an identical placeholder made meanwhile (by a session starting at the
        same time in the same project, with the same ``siblings`` inside) is taken as it
        is, anything else is refused."""
        try:
            if self.content is None:
                self.path.mkdir()
            else:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                with os.fdopen(os.open(self.path, flags, 0o644), "wb") as file:
                    file.write(self.content)
        except FileExistsError:
            if not self.is_unchanged(siblings or {}):
                raise

    def is_unchanged(self, siblings: Mapping[Path, Placeholder] | None = None) -> bool:
        """Whether the path is still exactly what sandbridge makes: a directory holding
        nothing but unchanged ``siblings`` (other placeholders of the same session), or a
        regular file with the placeholder's content (never through a symlink)."""
        siblings = siblings or {}
        with contextlib.suppress(OSError):
            if self.path.is_symlink():
                return False
            if self.content is None:
                return self.path.is_dir() and all(
                    child in siblings and siblings[child].is_unchanged(siblings)
                    for child in self.path.iterdir()
                )
            return self.path.is_file() and self.path.read_bytes() == self.content
        return False

    def remove_if_unchanged(self) -> None:
        """Remove it if it is still what sandbridge made (the owner may have used it since)."""
        if self.is_unchanged():  # empty by now: nested placeholders are removed first
            with contextlib.suppress(OSError):
                self.path.rmdir() if self.content is None else self.path.unlink()
