"""Running sessions, as the host's other commands see them (``sandbridge ls``).

Each live session owns a directory ``<state root>/sessions/<id>/`` where the state root
is ``${XDG_RUNTIME_DIR:-/tmp}/sandbridge-<uid>`` (0700), or, if something not ours holds
that name, a fallback ``sandbridge-<uid>.<random>`` beside it (:func:`writable_state_root`).
It holds ``session.json`` (id, pid, workdir, apps) and the session's host-only files: its
control socket and its logs. This directory is never the runtime dir the sandbox sees; it
lives beside it, so the runner hides it together with the runtime dirs
(``sandbox/host_paths.py``).

Liveness works like the runtime dir's: the session holds an ``flock`` on its directory
for its whole life, so a directory whose lock is free belongs to a dead session (even one
killed with SIGKILL) and is removed by the next listing. A session directory is built
under a hidden temporary name, locked, filled, and only then renamed into place, so a
listing never sees a half-made one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sandbridge.exceptions import SessionError
from sandbridge.places.runtime_dir import try_lock, why_not_ours
from sandbridge.private_dir import make_private_dir, require_private_dir
from sandbridge.protocol.contract import (
    CONTROL_SOCKET,
    DAEMON_SOCKET,
    SESSION_NAME_REGEX,
    STATE_PREFIX,
    runtime_base,
)
from sandbridge.protocol.jsonline import decode_json

SESSIONS = "sessions"
RECORD = "session.json"

NAME_PATTERN = re.compile(SESSION_NAME_REGEX)
# A session record is small (256 apps at most); anything bigger was not written by us.
MAX_RECORD_BYTES = 256 * 1024


def state_root() -> Path:
    """``${XDG_RUNTIME_DIR:-/tmp}/sandbridge-<uid>``: this user's session state."""
    return runtime_base() / f"{STATE_PREFIX}{os.getuid()}"


def _is_private_dir(path: Path) -> bool:
    try:
        require_private_dir(path, "state dir", SessionError)
    except (OSError, SessionError):
        return False
    return True


def _fallback_roots() -> list[Path]:
    """This user's fallback state roots, ``sandbridge-<uid>.<random>`` beside the usual
    one: only real directories of this user that others cannot open (anyone can make
    such a name in ``/tmp``; nobody else can make it ours)."""
    primary = state_root()
    prefix = f"{primary.name}."
    try:
        # Names first, then paths: the base may be a busy /tmp of thousands of entries.
        names = sorted(name for name in os.listdir(primary.parent) if name.startswith(prefix))
    except OSError:
        return []
    return [entry for name in names if _is_private_dir(entry := primary.parent / name)]


def state_roots() -> list[Path]:
    """Every state root of this user where sessions may be: the usual one if it is
    ours, then the fallbacks (see :func:`writable_state_root`)."""
    primary = state_root()
    return [*([primary] if _is_private_dir(primary) else []), *_fallback_roots()]


def writable_state_root() -> tuple[Path, str | None]:
    """The state root a new session uses, and why, when it is not the usual one.

    If another user (or anything not ours: a symlink, a file, a 0777 dir) holds
    ``sandbridge-<uid>``, the session goes to an existing fallback of ours, else to a
    fresh one made by ``mkdtemp`` (0700, unpredictable name, never an existing path):
    a squatter can neither stop sandbridge nor make it follow a link.
    """
    primary = state_root()
    try:
        return make_private_dir(primary, "state dir", SessionError), None
    except SessionError:
        pass
    fallbacks = _fallback_roots()
    if fallbacks:
        root = fallbacks[0]
    else:
        try:
            root = Path(tempfile.mkdtemp(prefix=f"{primary.name}.", dir=primary.parent))
        except OSError as exc:
            raise SessionError(f"cannot create a state dir in {primary.parent}: {exc}") from None
    return root, f"{primary} {why_not_ours(primary)}; session state is in {root} instead"


def sessions_dir(root: Path) -> Path:
    """``root``'s sessions directory, made private if missing."""
    root = make_private_dir(root, "state dir", SessionError)
    return make_private_dir(root / SESSIONS, "state dir", SessionError)


def _session_dirs(root: Path | None) -> list[Path]:
    """The sessions directories to read: ``root``'s, else those of :func:`state_roots`."""
    if root is not None:
        return [sessions_dir(root)]
    return [path for top in state_roots() if _is_private_dir(path := top / SESSIONS)]


def validate_name(name: str, what: str = "--name") -> str:
    """Return ``name`` if it can name a session, else raise with the offending value."""
    if not NAME_PATTERN.fullmatch(name):
        raise SessionError(
            f"{what} {name!r}: use 1-40 characters a-z 0-9 . _ -, starting with a letter or digit"
        )
    return name


def new_session_id() -> str:
    """A short random id for an unnamed session."""
    return f"s-{secrets.token_hex(3)}"


@dataclass(frozen=True, slots=True)
class AppRecord:
    """One registered app, without any secret (a private app's token is never written)."""

    port: int
    host_port: int
    base_path: str
    url: str
    private: bool
    # Who listens on ``port`` (``/proc``'s name of the process, or ``unknown``), when the
    # registration said; ``auto``: auto-publish made it (``publish = ...``).
    process: str | None = None
    auto: bool = False


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """What ``sandbridge ls`` shows of one live session."""

    id: str
    pid: int
    started: float
    workdir: str
    apps: list[AppRecord] = field(default_factory=list)
    # The session's runtime dir, where its upstream.sock is: serve-stdio reaches a far
    # app through it as the session's own host half does (docs/remote.md).
    runtime_dir: str = ""

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def _is_live(path: Path) -> bool | None:
    """True if a session holds ``path``'s lock, False if stale, None if not ours to judge."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_uid != os.getuid():
            return None
        if try_lock(fd):
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        return True
    finally:
        os.close(fd)


# A session's dir is made under ``.new-<random>`` and locked a moment later: unlocked in
# between, like an ended session's. One that young is another start's, never swept; one
# this old was left by a start that died in between.
STAGING_PREFIX = ".new-"
STAGING_GRACE_SECONDS = 60.0


def _sweep(base: Path) -> list[Path]:
    """Remove the directories of ended sessions under ``base``; return the live ones."""
    live: list[Path] = []
    for entry in sorted(base.iterdir()):
        if entry.name.startswith(STAGING_PREFIX) and _younger_than(entry, STAGING_GRACE_SECONDS):
            continue
        state = _is_live(entry)
        if state is False:
            shutil.rmtree(entry, ignore_errors=True)
        elif state and not entry.name.startswith("."):
            live.append(entry)
    return live


def _younger_than(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.lstat().st_mtime < seconds
    except OSError:
        return False


class SessionEntry:
    """This process's own session directory; :meth:`remove` deletes it."""

    def __init__(self, path: Path, fd: int, record: SessionRecord, *, owned: bool = True) -> None:
        self.path = path
        self._fd = fd
        self.record = record
        # Set when the state went to a fallback root: the line that says why.
        self.note: str | None = None
        # False for the daemon's view of a session its client created and removes.
        self.owned = owned

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def fd(self) -> int:
        """The locked directory's descriptor (the daemon gets a copy: docs/daemon.md)."""
        return self._fd

    @property
    def control_socket(self) -> Path:
        """The host-only socket owner commands use to reach this session."""
        return self.path / CONTROL_SOCKET

    @classmethod
    def create(
        cls,
        name: str | None,
        workdir: Path,
        root: Path | None = None,
        runtime_dir: Path | None = None,
        pid: int | None = None,
    ) -> SessionEntry:
        """Claim session ``name`` (or a fresh random id); refuse a name a live session holds.
        ``pid``: the session's process, when it is not this one."""
        session_id = new_session_id() if name is None else validate_name(name)
        # Another session ending removes the empty state dirs; make them again if so.
        for attempt in range(3):
            top, note = (root, None) if root is not None else writable_state_root()
            base = sessions_dir(top)
            _sweep(base)
            final = base / session_id
            if any(_is_live(other / session_id) for other in [base, *_session_dirs(root)]):
                raise SessionError(
                    f"session {session_id!r} is already running; choose another --name"
                )
            staging = base / f"{STAGING_PREFIX}{secrets.token_hex(8)}"
            try:
                os.mkdir(staging, 0o700)
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise SessionError(f"cannot create a session dir in {base}") from None
        fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        fcntl.flock(fd, fcntl.LOCK_EX)
        record = SessionRecord(
            session_id,
            os.getpid() if pid is None else pid,
            time.time(),
            str(workdir),
            runtime_dir="" if runtime_dir is None else str(runtime_dir),
        )
        entry = cls(staging, fd, record)
        entry._write(record)
        try:
            os.rename(staging, final)
        except OSError:
            entry.remove()
            raise SessionError(
                f"session {session_id!r} is already running; choose another --name"
            ) from None
        entry.path = final
        entry.note = note
        return entry

    @classmethod
    def attach(cls, path: Path, fd: int) -> SessionEntry:
        """The entry at ``path`` that another process created and holds (a ``run`` client
        the daemon serves), given as ``fd``, a descriptor of that same directory.

        Refused unless ``path`` is a live session directory of one of this user's state
        roots and ``fd`` is that directory: the daemon writes only where its client does.
        :meth:`remove` then only closes ``fd``; the client removes the directory."""
        roots = [top / SESSIONS for top in state_roots()]
        if path.parent not in roots or not validate_name(path.name, "session"):
            raise SessionError(f"session dir {path} is not in a state root of this user")
        try:
            same = os.path.samestat(os.fstat(fd), os.lstat(path))
        except OSError as exc:
            raise SessionError(f"session dir {path}: {exc.strerror}") from None
        record = _read_record(path) if same and _is_live(path) else None
        if record is None or record.id != path.name:
            raise SessionError(f"session dir {path} is not the live session it was given as")
        return cls(path, fd, record, owned=False)

    def set_apps(self, apps: list[AppRecord]) -> None:
        """Record the session's current apps for ``sandbridge ls``."""
        self.record = SessionRecord(
            self.record.id,
            self.record.pid,
            self.record.started,
            self.record.workdir,
            apps,
            self.record.runtime_dir,
        )
        self._write(self.record)

    def touch(self) -> None:
        """Tell the registry's watchers that this session's state changed beyond its
        record (a terminal or egress request, an egress decision): the dir's times are
        set, which inotify reports (``places/registry_watch.py``), and nothing is written."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.utime(self._fd)

    def _write(self, record: SessionRecord) -> None:
        # Write then rename: a reader sees the old record or the new one, never half.
        temporary = self.path / f".{RECORD}.tmp"
        temporary.write_text(json.dumps(record.to_json()))
        os.rename(temporary, self.path / RECORD)

    def remove(self) -> None:
        """Delete this session's directory, and the state dirs if no session is left."""
        if not self.owned:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            return
        shutil.rmtree(self.path, ignore_errors=True)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        # rmdir refuses a directory that another session still uses: nothing else is lost.
        with contextlib.suppress(OSError):
            os.rmdir(self.path.parent)
            os.rmdir(self.path.parent.parent)


def _read_record(path: Path) -> SessionRecord | None:
    try:
        with open(path / RECORD, "rb") as file:
            raw = file.read(MAX_RECORD_BYTES + 1)
        data = decode_json(raw, max_bytes=MAX_RECORD_BYTES)
        if not isinstance(data, dict):
            return None
        apps = [AppRecord(**app) for app in data.pop("apps", [])]
        return SessionRecord(**data, apps=apps)
    except (OSError, ValueError, TypeError):
        return None


def list_sessions(root: Path | None = None) -> list[SessionRecord]:
    """Live sessions, oldest first; stale directories found on the way are removed."""
    records: list[SessionRecord] = []
    for base in _session_dirs(root):
        for entry in _sweep(base):
            record = _read_record(entry)
            if record is not None and record.id == entry.name:
                records.append(record)
    return sorted(records, key=lambda record: record.started)


def session_path(session_id: str, root: Path | None = None) -> Path:
    """The directory of live session ``session_id``; refuse an unknown or ended one."""
    name = validate_name(session_id, "session")
    for base in _session_dirs(root):
        if _is_live(path := base / name):
            return path
    raise SessionError(f"no running session {session_id!r}; see sandbridge ls")


def daemon_sockets() -> list[Path]:
    """Where this user's daemon may listen: ``daemon.sock`` in each of :func:`state_roots`
    that has one (the usual root first)."""
    return [path for top in state_roots() if (path := top / DAEMON_SOCKET).exists()]
