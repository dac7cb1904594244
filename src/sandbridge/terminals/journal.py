"""Bounded, fsynced record stores: the single-use reservation journal and the audit log.

Both are a :class:`RecordRing`: a directory of 256 slot files, each one JSON record of at
most 16 KiB carrying a sequence number. Appending takes the directory's ``flock``,
writes the record to a temporary file, fsyncs it, renames it onto slot ``seq % 256`` and
fsyncs the directory, so a record that :meth:`RecordRing.append` returned survives a
crash. The ring never grows: the 257th record replaces the first.

The reservation journal refuses to overwrite a reservation whose approval has not yet
expired (``journal_full``): forgetting it would let the approval be used again, so the
journal fails closed instead. It is the one memory of every signed one-shot document:
an owner's approval (reserved before its terminal starts) and an owner's signed ``deny``
or ``revoke`` over the remote link (taken before it reaches the session), each by its
nonce until it expires, so a copy of either is refused ``used``.

Where: ``${XDG_STATE_HOME:-~/.local/state}/sandbridge/terminals/`` (0700), per user, so a
restart of the host (or another session that takes the same name) still sees every
reservation.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sandbridge.exceptions import JournalError
from sandbridge.places.known_projects import state_dir as sandbridge_state_dir
from sandbridge.private_dir import make_private_dir
from sandbridge.protocol.jsonline import decode_json

# The bounds: enough history to audit a day of terminals, never unbounded.
MAX_RECORDS = 256
MAX_RECORD_BYTES = 16 * 1024
LOCK = "lock"
RESERVATIONS = "reservations"
AUDIT = "audit"


def state_dir() -> Path:
    """``${XDG_STATE_HOME:-~/.local/state}/sandbridge/terminals``."""
    return sandbridge_state_dir() / "terminals"


def _private_dir(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return make_private_dir(
        path, "journal dir", lambda message: JournalError("unsafe_dir", message)
    )


# A slot is read without following a link or waiting on a FIFO; a read of a FIFO or a
# device then fails or finds nothing, and the slot is skipped.
_READ_SLOT = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


class RecordRing:
    """At most ``slots`` records of at most ``max_bytes`` each, oldest replaced first."""

    def __init__(
        self, path: Path, slots: int = MAX_RECORDS, max_bytes: int = MAX_RECORD_BYTES
    ) -> None:
        self.path = _private_dir(path)
        self.slots = slots
        self.max_bytes = max_bytes
        self._names = frozenset(self._slot_name(index) for index in range(slots))
        self._newest: int | None = None  # the last record appended here (_newest_locked)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the ring's lock (other sessions of this user share the ring)."""
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _slot_name(self, seq: int) -> str:
        """The name of the slot file that holds record ``seq``."""
        return f"{seq % self.slots:03d}.json"

    @contextlib.contextmanager
    def _directory(self) -> Iterator[int]:
        """The ring directory's descriptor, for reads by name and its fsync."""
        directory = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            yield directory
        finally:
            os.close(directory)

    def records(self) -> list[dict[str, Any]]:
        """Every record, oldest first; unreadable or foreign files are skipped: one that is
        not a regular file (a link, a FIFO: opened without following or waiting, so
        nothing placed here holds the broker), over ``max_bytes``, not a JSON object with an
        integer ``seq``. The slots the directory lists are read through its descriptor,
        one ``open`` and ``read`` each."""
        found: list[dict[str, Any]] = []
        with self._directory() as directory:
            for name in sorted(self._names.intersection(os.listdir(directory))):
                record = self._read(directory, name)
                if record is not None:
                    found.append(record)
        return sorted(found, key=lambda record: int(record["seq"]))

    def _read(self, directory: int, name: str) -> dict[str, Any] | None:
        """The record in slot file ``name``, or None (see :meth:`records`)."""
        try:
            fd = os.open(name, _READ_SLOT, dir_fd=directory)
            try:
                raw = os.read(fd, self.max_bytes + 1)
            finally:
                os.close(fd)
            record = decode_json(raw, max_bytes=self.max_bytes)
        except (OSError, ValueError):
            return None
        if isinstance(record, dict) and isinstance(record.get("seq"), int):
            return record
        return None

    def _newest_locked(self) -> int | None:
        """The newest record's ``seq`` (None: no record yet), under the lock.

        This object's last append is remembered. If its slot still holds it, the slots after
        it are read in turn while each holds the next ``seq`` (other sessions' appends
        since); the newest is found at a slot that holds what a full ring holds there (the
        oldest record, ``slots`` before the next) or, while the ring is not full yet,
        nothing. Anything else (the remembered record gone, a slot unreadable or out of
        sequence: none that this class writes) reads the whole ring, as does a ring never
        appended to here: two reads instead of ``slots`` for an append."""
        known = self._newest
        if known is not None:
            with self._directory() as directory:
                if self._seq_at(directory, known) == known:
                    seq = known
                    for _ in range(self.slots):
                        following = self._seq_at(directory, seq + 1)
                        if following == seq + 1:
                            seq += 1
                            continue
                        oldest = seq + 1 - self.slots
                        if following == oldest or (following is None and oldest < 0):
                            return seq
                        break
        records = self.records()
        return int(records[-1]["seq"]) if records else None

    def _seq_at(self, directory: int, seq: int) -> int | None:
        """The ``seq`` of the record in ``seq``'s slot, if one is readable there."""
        record = self._read(directory, self._slot_name(seq))
        return None if record is None else int(record["seq"])

    def _write(self, seq: int, record: dict[str, Any]) -> None:
        data = json.dumps({**record, "seq": seq}, sort_keys=True).encode()
        if len(data) > self.max_bytes:
            raise JournalError(
                "record_too_big", f"a journal record of {len(data)} bytes exceeds {self.max_bytes}"
            )
        temporary = self.path / f".{seq}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temporary, self.path / self._slot_name(seq))
        with self._directory() as directory:
            os.fsync(directory)

    def append_locked(self, record: dict[str, Any], records: list[dict[str, Any]]) -> int:
        """Append under a lock the caller holds, given the current ``records``."""
        return self._append_after(None if not records else int(records[-1]["seq"]), record)

    def _append_after(self, newest: int | None, record: dict[str, Any]) -> int:
        """Write ``record`` as the one after ``newest`` (None: the first) and remember it."""
        seq = 0 if newest is None else newest + 1
        self._write(seq, record)
        self._newest = seq
        return seq

    def append(self, record: dict[str, Any]) -> int:
        """Append ``record`` durably; return its sequence number. Only the newest record is
        looked for (:meth:`_newest_locked`), not the whole ring read: a caller that decides
        from the records reads them and uses :meth:`append_locked`."""
        with self.locked():
            return self._append_after(self._newest_locked(), record)

    def replace_locked(self, seq: int, record: dict[str, Any]) -> None:
        self._write(seq, record)


# The state of a signed deny or revoke the journal took: spent at once, never
# ``reserved`` (so never marked ``aborted``: no terminal ever hung on it).
ANSWERED = "answered"


class ReservationJournal:
    """Nonces of signed one-shot documents (approvals, deny and revoke answers), each
    taken once and remembered until its document expires."""

    def __init__(self, root: Path | None = None, slots: int = MAX_RECORDS) -> None:
        base = _private_dir(state_dir() if root is None else root)
        self.ring = RecordRing(base / RESERVATIONS, slots)

    def reserve(self, nonce: str, expires: float, fields: dict[str, Any], now: float) -> int:
        """Reserve an approval's ``nonce`` durably before its terminal starts, or refuse:
        ``used`` if it ever was, ``journal_full`` if making room would forget a document
        still valid."""
        return self._take(nonce, expires, {**fields, "state": "reserved"}, now, "approval")

    def take_answer(self, nonce: str, expires: float, fields: dict[str, Any], now: float) -> int:
        """Take a signed deny or revoke's ``nonce`` once, until ``expires`` (when the far
        clock stops accepting it); refuse ``used`` or ``journal_full`` as :meth:`reserve`."""
        kind = str(fields.get("kind", "answer"))
        return self._take(nonce, expires, {**fields, "state": ANSWERED}, now, f"signed {kind}")

    def _take(
        self, nonce: str, expires: float, fields: dict[str, Any], now: float, what: str
    ) -> int:
        with self.ring.locked():
            records = self.ring.records()
            if any(record.get("nonce") == nonce for record in records):
                raise JournalError(
                    "used",
                    "this approval was already used; ask for a new one"
                    if what == "approval"
                    else f"this {what} was already taken; a copy of it is refused",
                )
            if len(records) >= self.ring.slots and float(records[0].get("expires", 0)) > now:
                # Forgetting the oldest would let its document be used again: refuse the
                # new one instead, until the oldest expires.
                raise JournalError(
                    "journal_full",
                    f"{self.ring.slots} approvals and signed answers are still valid; "
                    f"this {what} is refused: try again when the oldest expires",
                )
            record = {**fields, "nonce": nonce, "expires": expires, "pid": os.getpid()}
            return self.ring.append_locked(record, records)

    def finish(self, seq: int, state: str) -> None:
        """Mark reservation ``seq`` ended (``ended`` or ``aborted``); it stays used."""
        with self.ring.locked():
            for record in self.ring.records():
                if record["seq"] == seq:
                    self.ring.replace_locked(seq, {**record, "state": state})

    def abort_orphans(self) -> list[dict[str, Any]]:
        """Mark reservations of hosts that died (crash, SIGKILL) as aborted; return them."""
        aborted = []
        with self.ring.locked():
            for record in self.ring.records():
                pid = record.get("pid")
                if record.get("state") == "reserved" and isinstance(pid, int) and not _alive(pid):
                    self.ring.replace_locked(record["seq"], {**record, "state": "aborted"})
                    aborted.append(record)
        return aborted


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class AuditLog:
    """Metadata-only records: who, which session, when, sizes, byte counts, end reasons.

    Never terminal bytes, never command arguments: callers pass only the fields below.
    """

    FIELDS = frozenset(
        {
            "event", "session", "request", "requester", "reason_code", "reason", "duration", "ttl",
            "expires", "rows", "cols", "bytes_in", "bytes_out", "end", "status", "time", "owner",
        }
    )  # fmt: skip

    def __init__(self, root: Path | None = None, slots: int = MAX_RECORDS) -> None:
        base = _private_dir(state_dir() if root is None else root)
        self.ring = RecordRing(base / AUDIT, slots)

    def record(self, event: str, **fields: Any) -> None:
        unknown = set(fields) - self.FIELDS
        if unknown:
            raise ValueError(f"audit fields {sorted(unknown)} are not metadata fields")
        self.ring.append({"event": event, "time": time.time(), **fields})

    def records(self) -> list[dict[str, Any]]:
        return self.ring.records()
