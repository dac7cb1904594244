"""A folder the sandbox can change under the host, held by its descriptor.

The project's ``.sandbridge`` lies in the workdir when the workdir is the project root,
and a live sandbox (this session's, or another one's of the same project) can swap it for
a link to any directory the owner can reach (``~/.ssh``, another project's
``.sandbridge``) at any moment, and back again, as fast as the kernel renames. A check of
the path ("not a link") followed by an open of ``folder/name`` by its whole path leaves
that moment open: the host then reads another project's policy and secrets, or writes the
owner's lines into another directory.

So the host opens the folder once, by its parent's descriptor with ``O_NOFOLLOW``
(ELOOP or ENOTDIR for a link, whatever it points to), and every file in it by that
descriptor, again with ``O_NOFOLLOW`` and never blocking (a FIFO does not hang the
host). The parent itself is the owner's (the project root is the workdir or above it,
which the sandbox cannot rename), and is opened by its path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path
from types import TracebackType

# A file the host reads or appends to in the folder: never through a link, never
# blocking on a FIFO, never handed to a child.
FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class HeldFolder:
    """An open folder (see the module's docstring); a context manager that closes it."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    @classmethod
    def open(cls, path: Path) -> HeldFolder | None:
        """The folder at ``path``, or ``None`` if there is none (nor a parent). Raises
        :class:`OSError` (``ELOOP`` or ``ENOTDIR``) when ``path`` is a link or not a
        directory."""
        try:
            return cls._open(path, None)
        except FileNotFoundError:
            return None

    @classmethod
    def make(cls, path: Path, mode: int = 0o755) -> HeldFolder:
        """The folder at ``path``, made with ``mode`` first if missing. Raises
        :class:`OSError`: ``ELOOP`` or ``ENOTDIR`` as :meth:`open`, ``ENOENT`` for a
        parent that is missing or a folder gone again before its open (the sandbox
        removed it)."""
        return cls._open(path, mode)

    @classmethod
    def _open(cls, path: Path, create_mode: int | None) -> HeldFolder:
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if create_mode is not None:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(path.name, create_mode, dir_fd=parent)
            fd = os.open(path.name, DIRECTORY_FLAGS, dir_fd=parent)
        finally:
            os.close(parent)
        return cls(fd, path)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> HeldFolder:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def open_file(self, name: str, flags: int, mode: int = 0o644) -> int:
        """A descriptor of the regular file ``name`` in the folder (``flags`` besides
        :data:`FILE_FLAGS`); :class:`OSError` ``ELOOP`` for a link, ``EINVAL`` for
        anything but a regular file (a FIFO, a device, a directory)."""
        fd = os.open(name, flags | FILE_FLAGS, mode, dir_fd=self.fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", str(self.path / name))
        return fd

    def lexists(self, name: str) -> bool:
        """Whether the folder holds anything named ``name`` (a link counts)."""
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def replace(self, name: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``name`` whole: a new file under a fresh name (``O_EXCL``: nothing
        planted there is opened or followed), renamed over ``name`` in the same folder (a
        link there is replaced, not followed)."""
        temporary = f".{name}.{secrets.token_hex(8)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        fd = os.open(temporary, flags | FILE_FLAGS, mode, dir_fd=self.fd)
        try:
            try:
                os.fchmod(fd, mode)  # whatever the owner's umask
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(temporary, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=self.fd)
            raise
