"""The projects sandbridge has run or set up for this user, so that every sandbox hides
their policy directories.

Threat: a sandbox sees the host's file system read-only, all but ``$HOME``, ``/tmp`` and
``/run``. A project kept elsewhere (``/srv/b``, ``/work/b``, ``/data/b``) showed its
``.sandbridge/env``, its secrets file, to every other project's sandbox through that
read-only root: ``cat /work/b/.sandbridge/env``.

Defence: sandbridge cannot search every disk for such files, but a secrets file is only
ever read by ``sandbridge run`` in its own project. So each ``run`` (and ``policy init``)
remembers its project's root here, and every sandbox gets an empty read-only view over
the ``.sandbridge/`` directory of each remembered project it would otherwise see
(:attr:`~sandbridge.sandbox.spec.SandboxSpec.other_projects`). A project is hidden from
its first ``run`` or ``policy init`` on; one never run with sandbridge is not known
(docs/security.md, residual risks).

Where: ``${XDG_STATE_HOME:-~/.local/state}/sandbridge/projects`` (a 0700 directory; the
sandbox never sees the owner's home), one absolute path per line, the most recent last,
at most :data:`MAX_PROJECTS`; a project whose directory is gone is dropped from the list
when it is next read or written (under the lock, the list written whole and renamed into
place: sessions read and write it side by side). The list only ever hides things: a wrong
entry costs an empty view.

A project can go between the list's reading and the backend's mounts (``rm -rf`` of a
project while another session starts): :func:`present`, asked again just before the
backend's set-up is written, leaves it out with one line, and the unshare backend's init
skips one gone by its mount; the start goes on. bwrap cannot make a mount depend on its
destination: one removed in the milliseconds after that last check still fails a bwrap
start (docs/runner.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from sandbridge import log
from sandbridge.exceptions import SandbridgeError
from sandbridge.places.real_path import real_path
from sandbridge.private_dir import make_private_dir

FILE = "projects"
# More than anyone keeps: past it the oldest are forgotten first.
MAX_PROJECTS = 1024
# An absolute path is at most PATH_MAX bytes; the file holds at most MAX_PROJECTS of them.
MAX_FILE_BYTES = MAX_PROJECTS * 4096
POLICY_DIR_NAME = ".sandbridge"


def state_dir() -> Path:
    """``${XDG_STATE_HOME:-~/.local/state}/sandbridge``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "sandbridge"


def remember(root: Path) -> None:
    """Add ``root`` (a project's top directory) to the list, as its most recent entry.
    A list that cannot be written is said once, in a warning; the session goes on."""
    root = root.resolve()
    if "\n" in str(root):
        return  # not representable in the list (and no project anyone keeps)
    if _already_last(root):
        return
    try:
        state_dir().parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory = make_private_dir(state_dir(), "state dir", SandbridgeError)
        with _locked(directory):
            known = [path for path in _read(directory / FILE) if path != root]
            known = [path for path in known if not _is_gone(path)][-(MAX_PROJECTS - 1) :]
            _write(directory / FILE, [*known, root])
    except (OSError, SandbridgeError) as exc:
        log.warning("known_projects.not_written", root=str(root), error=str(exc))


def _already_last(root: Path) -> bool:
    """Whether the list has ``root`` as its most recent entry and nothing gone: the list
    :func:`remember` would write is the one there, so it is left as it is (a project run
    again and again, the common start). Read without the lock: the list is only ever
    replaced whole."""
    try:
        listed = _read(state_dir() / FILE)
    except OSError:
        return False  # remember says why, under the lock
    return bool(listed) and listed[-1] == root and not any(_is_gone(p) for p in listed)


def policy_dirs() -> list[Path]:
    """The ``.sandbridge`` directories of the remembered projects that exist now (a real
    directory, not a link to one), each at its real path.

    A remembered root is written resolved, so a link on the way to it now was put
    there after (``mv b b-real; ln -s b-real b`` by a sandbox that could write ``b``'s
    parent): the directory is given at the path the links lead to, never through them,
    since a backend laying a view at a path follows every link in it."""
    try:
        known = _read_pruned(state_dir())
    except OSError as exc:
        log.warning("known_projects.unreadable", error=exc.strerror or str(exc))
        return []
    found = []
    for root in known:
        path = root / POLICY_DIR_NAME
        with contextlib.suppress(OSError):
            if not stat.S_ISDIR(path.lstat().st_mode):
                continue
            real = Path(real_path(path))
            if real != path:
                log.warning("known_projects.moved", root=str(root), now=str(real.parent))
            if real not in found:
                found.append(real)
    return found


def known() -> list[Path]:
    """The remembered project roots, oldest first (``OSError``: the list is there but is
    not a regular file of this user, or cannot be read)."""
    return _read(state_dir() / FILE)


def present(policy_dirs: tuple[Path, ...]) -> tuple[Path, ...]:
    """Those of ``policy_dirs`` (:func:`policy_dirs`, read a moment ago) that are still
    directories at those very paths; each one gone meanwhile is named in one line and
    left out: a backend refuses to lay a view where nothing is, and nothing is left there
    to hide. One reached through a link now (a parent moved and linked back meanwhile) is
    left out too, named the same way: a backend would lay the view wherever the link
    leads."""
    kept = []
    for path in policy_dirs:
        try:
            there = stat.S_ISDIR(path.lstat().st_mode) and real_path(path) == str(path)
        except OSError:
            there = False
        if there:
            kept.append(path)
        else:
            why = "gone since the list was read"
            log.info("known_projects.skipped", policy_dir=str(path), why=why)
    return tuple(kept)


def _is_gone(path: Path) -> bool:
    """Whether nothing (or no directory) is at ``path`` now. Another error (a parent the
    user cannot search for a while) says nothing of the project: not gone."""
    try:
        return not stat.S_ISDIR(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False


def _read_pruned(directory: Path) -> list[Path]:
    """The list's roots, without those whose directory is gone, which are dropped from
    the file too (under the lock, read again there: another session may have written it
    meanwhile). A list that cannot be rewritten is said, and read all the same."""
    known = _read(directory / FILE)
    if not any(_is_gone(root) for root in known):
        return known
    try:
        with _locked(directory):
            known = _read(directory / FILE)
            kept = [root for root in known if not _is_gone(root)]
            if len(kept) != len(known):
                _write(directory / FILE, kept)
                log.debug("known_projects.pruned", count=len(known) - len(kept))
            return kept
    except OSError as exc:
        log.warning("known_projects.not_written", error=exc.strerror or str(exc))
        return [root for root in known if not _is_gone(root)]


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Held while the list is read and rewritten: sessions start side by side."""
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    fd = os.open(directory / f".{FILE}.lock", flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read(path: Path) -> list[Path]:
    """The list's paths; a missing file is an empty list, anything that is not a regular
    file of ours is an error. Lines that are not clean absolute paths are skipped."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return []
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise OSError(f"{path}: not a regular file of this user")
        data = file.read(MAX_FILE_BYTES + 1)
    paths = []
    for raw in data[:MAX_FILE_BYTES].split(b"\n"):
        text = os.fsdecode(raw)
        if text.startswith("/") and "\0" not in text and os.path.normpath(text) == text:
            paths.append(Path(text))
    return paths[-MAX_PROJECTS:]


def _write(path: Path, paths: list[Path]) -> None:
    temporary = path.with_name(f".{FILE}.new")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(b"".join(os.fsencode(str(p)) + b"\n" for p in paths))
    os.replace(temporary, path)
