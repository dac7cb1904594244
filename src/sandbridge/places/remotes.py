"""Far machines this user's ``sandbridge connect`` serves, as ``sandbridge ls`` sees them.

Each live ``connect`` owns ``<state root>/remotes/<machine>/`` and writes ``machine.json``
there (its machine, transport, whether the link is up, and each far app's local origin),
holding an ``flock`` on the directory for its whole life: a directory whose lock is
free belongs to a ``connect`` that ended (even by SIGKILL) and is removed by the next
listing, as session directories are (``registry.py``).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sandbridge.exceptions import RemoteWireError, SessionError
from sandbridge.places.registry import (
    _sweep,
    state_roots,
    validate_name,
    writable_state_root,
)
from sandbridge.places.runtime_dir import try_lock
from sandbridge.private_dir import make_private_dir
from sandbridge.protocol.far_sessions import FarSession, parse_sessions
from sandbridge.protocol.jsonline import decode_json

REMOTES = "remotes"
RECORD = "machine.json"
# The live connect's terminal control socket, in its own 0700 machine directory: the
# laptop's ``sandbridge terminal ... HOST:...`` commands reach the far sessions through it.
CONTROL = "control.sock"
# A machine record holds what one APPS frame (1 MiB) said, written out: each app's base
# path twice (as itself and in its URL) and each far text as JSON escapes (a 4-byte
# character, sent raw, is written as 12 bytes), so up to about three times the frame:
# anything bigger was not written by us. At 1 MiB, the records a far side could cause
# were not read back, and its machine vanished from ls and the dashboard while connect
# went on serving its apps.
MAX_RECORD_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RemoteAppRecord:
    """One far app and the local origin that serves it."""

    session: str
    port: int
    base_path: str
    url: str  # without a private app's token: that is said once, never written
    host_port: int
    private: bool = False  # served behind the laptop's own token and cookie


@dataclass(frozen=True, slots=True)
class RemoteRecord:
    """What ``sandbridge ls`` shows of one far machine."""

    machine: str
    pid: int
    started: float
    via: str
    connected: bool
    apps: list[RemoteAppRecord] = field(default_factory=list)
    # The far sessions as the far machine last described them (docs/remote.md): its
    # word, checked as it arrived and again as it is read; none while the link is down.
    sessions: tuple[FarSession, ...] = ()

    def to_json(self) -> dict[str, object]:
        return asdict(self)


class RemoteEntry:
    """This ``connect``'s own machine directory; :meth:`remove` deletes it."""

    def __init__(self, path: Path, fd: int, record: RemoteRecord) -> None:
        self.path = path
        self._fd = fd
        self.record = record

    @classmethod
    def create(cls, machine: str, via: str) -> RemoteEntry:
        """Claim ``machine``; refuse a name another live ``connect`` holds."""
        name = validate_name(machine, "--name")
        top, _ = writable_state_root()
        base = make_private_dir(
            make_private_dir(top, "state dir", SessionError) / REMOTES, "state dir", SessionError
        )
        _sweep(base)
        path = base / name
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            raise SessionError(
                f"machine {name!r} is already connected; choose another --name"
            ) from None
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        if not try_lock(fd):
            os.close(fd)
            raise SessionError(f"machine {name!r} is already connected; choose another --name")
        entry = cls(path, fd, RemoteRecord(name, os.getpid(), time.time(), via, False))
        entry.update(False, [])
        return entry

    def update(
        self, connected: bool, apps: list[RemoteAppRecord], sessions: tuple[FarSession, ...] = ()
    ) -> None:
        """Record whether the link is up, the far apps served now and the far sessions."""
        record = self.record
        self.record = RemoteRecord(
            record.machine, record.pid, record.started, record.via, connected, apps, sessions
        )
        temporary = self.path / f".{RECORD}.tmp"
        temporary.write_text(json.dumps(self.record.to_json()))
        os.rename(temporary, self.path / RECORD)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def _read(path: Path) -> RemoteRecord | None:
    try:
        with open(path / RECORD, "rb") as file:
            data = decode_json(file.read(MAX_RECORD_BYTES + 1), max_bytes=MAX_RECORD_BYTES)
        if not isinstance(data, dict):
            return None
        apps = [RemoteAppRecord(**app) for app in data.pop("apps", [])]
        sessions = parse_sessions(data.pop("sessions", []))
        return RemoteRecord(**data, apps=apps, sessions=sessions)
    except (OSError, ValueError, TypeError, RemoteWireError):
        return None


def remote_control_socket(machine: str) -> Path:
    """The terminal control socket of the live ``connect`` serving ``machine``; refuse
    a machine no live ``connect`` serves, naming it."""
    name = validate_name(machine, "machine")
    for top in state_roots():
        base = top / REMOTES
        if base.is_dir() and (base / name) in _sweep(base):
            return base / name / CONTROL
    raise SessionError(
        f"no sandbridge connect serves a machine named {name!r} (see sandbridge ls; "
        "start one with sandbridge connect ... --name NAME)"
    )


def list_remotes() -> list[RemoteRecord]:
    """The far machines of live ``connect``s, oldest first; stale ones are removed."""
    records: list[RemoteRecord] = []
    for top in state_roots():
        base = top / REMOTES
        if not base.is_dir():
            continue
        for entry in _sweep(base):
            record = _read(entry)
            if record is not None and record.machine == entry.name:
                records.append(record)
    return sorted(records, key=lambda record: record.started)
