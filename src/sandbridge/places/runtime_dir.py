"""The session's runtime directory: ``${XDG_RUNTIME_DIR:-/tmp}/ags-webview-relay-<pid>``.

It is created 0700 and held with an ``flock`` on the directory itself for the life of
the session. The sandbox can write inside it (it holds the sockets) but cannot take
that lock away, so the next start can tell a stale directory (lock free: its session
is gone, even after SIGKILL) from a live one. Removal never follows a symlink out of
the directory: :func:`shutil.rmtree` works on directory file descriptors.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sandbridge.exceptions import RuntimeDirError
from sandbridge.private_dir import require_private_dir
from sandbridge.protocol.contract import EGRESS_SOCKET, RELAY_SOCKET, UPSTREAM_SOCKET, runtime_base
from sandbridge.protocol.contract import RUNTIME_DIR_PREFIX as PREFIX

# The random part of a fallback runtime dir's name: unguessable enough that nobody can
# squat it in advance, short enough that its socket paths stay within AF_UNIX's 108 bytes.
FALLBACK_TOKEN_BYTES = 6


def default_path(pid: int | None = None) -> Path:
    """The contract's runtime dir path for process ``pid`` (default: this one)."""
    return runtime_base() / f"{PREFIX}{os.getpid() if pid is None else pid}"


def _is_runtime_name(name: str) -> bool:
    """``ags-webview-relay-<pid>``, or the fallback ``ags-webview-relay-<pid>.<random>``."""
    suffix = name.removeprefix(PREFIX)
    pid, _, token = suffix.partition(".")
    return suffix != name and pid.isdigit() and (token == "" or token.isalnum())


def why_not_ours(path: Path) -> str:
    """Why an existing ``path`` cannot be this session's private dir, in a few words."""
    try:
        info = path.lstat()
    except OSError as exc:
        return f"cannot be inspected ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid != os.getuid():
        return f"belongs to uid {info.st_uid}"
    if info.st_mode & 0o077:
        return f"has mode {stat.S_IMODE(info.st_mode):o}"
    return "is in use by another session"


def try_lock(fd: int) -> bool:
    """Take ``fd``'s exclusive flock without waiting; False if a live session holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def clean_stale(base: Path | None = None) -> list[Path]:
    """Remove runtime dirs whose session is gone; return what was removed."""
    base = runtime_base() if base is None else base
    removed: list[Path] = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    uid = os.getuid()
    for entry in entries:
        if not _is_runtime_name(entry.name):
            continue
        try:
            fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue  # not a directory, a symlink, or gone: never touched
        try:
            info = os.fstat(fd)
            if info.st_uid != uid or not try_lock(fd):
                continue
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
        finally:
            os.close(fd)
    return removed


def unbound_name(fd: int, name: str) -> str | None:
    """Remove ``name`` from the directory ``fd`` so that a socket can be bound there
    anew (a link is removed, never followed; a missing name is fine): ``None``, or why it
    cannot be removed (the sandbox or a container made it a directory, say)."""
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _remove_host_sockets(fd: int, path: Path) -> None:
    """Remove what holds the names of the host's sockets in the locked dir ``fd``: a
    host killed with SIGKILL left its sockets there (binding over them failed), and the
    container writes the dir. A name that cannot be removed is refused, naming it."""
    for name in (RELAY_SOCKET, EGRESS_SOCKET):
        if (why := unbound_name(fd, name)) is not None:
            raise RuntimeDirError(
                f"{path / name}: cannot be removed to bind sandbridge's socket there "
                f"({why}); the container can write the runtime dir: remove it"
            )


@dataclass
class RuntimeDir:
    """A created, locked runtime dir; :meth:`remove` deletes it."""

    path: Path
    owned: bool = True
    _fd: int = field(default=-1, repr=False)
    # Set when the contract's path was taken and the dir was made elsewhere: say so.
    note: str | None = None
    # The daemon's view of a client's dir: removing it only closes the descriptor (the
    # sandbox's sockets stay for the next daemon; the client removes the dir).
    served: bool = False

    @property
    def fd(self) -> int:
        """The locked directory's descriptor (the daemon gets a copy: docs/daemon.md)."""
        return self._fd

    @property
    def relay_socket(self) -> Path:
        return self.path / RELAY_SOCKET

    @property
    def upstream_socket(self) -> Path:
        return self.path / UPSTREAM_SOCKET

    @classmethod
    def create(cls, path: Path | None = None, pid: int | None = None) -> RuntimeDir:
        """Clean stale dirs, then create and lock a fresh runtime dir (mode 0700).

        Without ``path`` (``sandbridge run``, whose sandbox sees the dir only at
        :data:`MOUNT_POINT`), a contract path that exists all the same (another local
        user made it first, or a symlink, or a file) is never used nor followed: the dir
        is made under an unpredictable name beside it, and :attr:`note` says why.
        ``pid``: the session's process, when it is not this one (a thin client's run,
        which the daemon's run builder prepares).
        """
        if path is None:
            wanted = default_path(pid)
            clean_stale(wanted.parent)
            if not os.path.lexists(wanted):
                return cls._make(wanted)
            fallback = wanted.with_name(f"{wanted.name}.{secrets.token_hex(FALLBACK_TOKEN_BYTES)}")
            made = cls._make(fallback)
            made.note = f"{wanted} {why_not_ours(wanted)}; the runtime dir is {fallback} instead"
            return made
        clean_stale(path.parent)
        return cls._make(path)

    @classmethod
    def _make(cls, path: Path) -> RuntimeDir:
        exists = RuntimeDirError(f"runtime dir {path} already exists and belongs to a live session")
        if os.path.lexists(path):
            raise exists
        # The dir is made under a name clean_stale never matches, locked, and only then
        # renamed into place: another session's clean_stale, running at the same moment,
        # would otherwise find it unlocked between mkdir and flock and remove it.
        try:
            staging = Path(tempfile.mkdtemp(prefix=f".{PREFIX}new-", dir=path.parent))
        except OSError as exc:
            raise RuntimeDirError(f"cannot create runtime dir {path}: {exc.strerror}") from None
        fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try_lock(fd)  # nobody else knows the staging name: the lock is free
        try:
            os.rename(staging, path)
        except OSError:
            os.close(fd)
            os.rmdir(staging)
            raise exists from None
        return cls(path=path, owned=True, _fd=fd)

    @classmethod
    def adopt(cls, path: Path) -> RuntimeDir:
        """Use an existing dir (``sandbridge host --runtime-dir``), creating it if missing."""
        if not path.exists():
            return cls.create(path)
        require_private_dir(
            path, "runtime dir", RuntimeDirError, "give --runtime-dir a new directory of your own"
        )
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        if not try_lock(fd):
            os.close(fd)
            raise RuntimeDirError(f"runtime dir {path} is in use by another sandbridge host")
        try:
            _remove_host_sockets(fd, path)
        except BaseException:
            os.close(fd)
            raise
        return cls(path=path, owned=False, _fd=fd)

    def remove(self) -> None:
        """Delete what this session created (the whole dir if it made it)."""
        if self.owned and not self.served:
            shutil.rmtree(self.path, ignore_errors=True)
        elif not self.served:
            for name in (RELAY_SOCKET, UPSTREAM_SOCKET):
                with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
                    (self.path / name).unlink()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
