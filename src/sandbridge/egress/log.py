"""The session's egress decisions: a rotating detail log and a bounded tally.

Each line of ``egress.jsonl``: ``{"time": ..., "decision": "allowed"|"refused",
"kind": "host-service"|"proxy", "destination": "HOST:PORT", "address": "IP"|null,
"reason": "..."}``. No payload, no header, no credential is ever written. The file is
bounded: past :data:`MAX_LOG_BYTES` it is renamed to ``egress.jsonl.1`` (replacing the
previous one) and a new one begins, so a sandbox that hammers refused destinations costs
the host at most twice that.

Rotation forgets, and the sandbox chooses what fills the log: ~10,000 cheap refused
connections would push every earlier allowed one out of it. So ``sandbridge status``
reads ``egress-tally.jsonl`` instead: one line per (decision, kind, destination) with its
count and first and last time, the last line of each being its count: a decision appends
one line, and the file is written whole (write, then rename) once it holds
:data:`TALLY_COMPACT_FACTOR` times the lines it needs.
Allowed and refused destinations have separate budgets, so refusals can never crowd out
an allowed destination, and a decision past its budget is counted under
:data:`OTHER_DESTINATIONS` rather than dropped.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sandbridge import log
from sandbridge.protocol.jsonline import decode_json

LOG_NAME = "egress.jsonl"
# 1 MiB holds ~5000 decisions: days of a normal session; a flood rotates instead of growing.
MAX_LOG_BYTES = 1024 * 1024
# Reasons are written by sandbridge, but they quote hostile names: cap what one line holds.
MAX_FIELD_CHARS = 300
TALLY_NAME = "egress-tally.jsonl"
# Distinct destinations the tally names, per decision (a line is at most ~700 bytes, and
# the file is written whole now and then). Every allowed destination is a real
# connection its owner should see: 256 is far more than a build's registries and mirrors.
# Refused ones are the sandbox's to invent: 64 show what it tried, the rest are counted.
MAX_ALLOWED_DESTINATIONS = 256
MAX_REFUSED_DESTINATIONS = 64
# The tally file is appended to, one line a decision, and written whole again once it
# holds this many times the lines it needs (so at most this many times its size).
TALLY_COMPACT_FACTOR = 4
# Where decisions past a budget are counted, per decision and kind.
OTHER_DESTINATIONS = "(other destinations)"


@dataclass(frozen=True, slots=True)
class DestinationTally:
    """How often one destination was allowed or refused, when first and last, and why."""

    decision: str
    kind: str
    destination: str
    count: int
    first: float
    last: float
    reason: str


TallyKey = tuple[str, str, str]


@dataclass
class EgressTally:
    """Counts decisions per (decision, kind, destination), bounded per decision (sans-I/O)."""

    _tallies: dict[TallyKey, DestinationTally] = field(default_factory=dict)
    # Each tally's line, kept so a decision re-encodes one line, not the whole file.
    _lines: dict[TallyKey, str] = field(default_factory=dict)
    _named: dict[str, int] = field(default_factory=dict)

    def add(self, decision: str, kind: str, destination: str, reason: str, when: float) -> str:
        """Count one decision (under :data:`OTHER_DESTINATIONS` past its budget); return
        the tally's new line."""
        key = (decision, kind, destination)
        if key not in self._tallies:
            budget = MAX_ALLOWED_DESTINATIONS if decision == "allowed" else MAX_REFUSED_DESTINATIONS
            if self._named.get(decision, 0) < budget:
                self._named[decision] = self._named.get(decision, 0) + 1
            else:
                key = (decision, kind, OTHER_DESTINATIONS)
                reason = f"more than {budget} distinct {decision} destinations"
        old = self._tallies.get(key)
        tally = DestinationTally(
            *key,
            count=1 if old is None else old.count + 1,
            first=when if old is None else old.first,
            last=when,
            reason=reason,
        )
        self._tallies[key] = tally
        line = json.dumps(asdict(tally), separators=(",", ":")) + "\n"
        self._lines[key] = line
        return line

    def text(self) -> str:
        """The tally file's content: one JSON line per tally."""
        return "".join(self._lines.values())

    def __len__(self) -> int:
        return len(self._lines)

    def tallies(self) -> list[DestinationTally]:
        """Refusals first, then by destination; each decision's other destinations last."""
        return sorted(self._tallies.values(), key=_order)


def _order(t: DestinationTally) -> tuple[bool, bool, str]:
    return t.decision != "refused", t.destination == OTHER_DESTINATIONS, t.destination


@dataclass
class EgressLog:
    """Records decisions next to ``path`` (``None``: log nowhere, e.g. ``sandbridge host``)."""

    path: Path | None
    _tally: EgressTally = field(default_factory=EgressTally)
    # Called after each decision counted (the owner's dashboard shows the counts).
    on_record: Callable[[], None] = field(default=lambda: None)
    # Lines in the tally file now (appended since it was last written whole).
    _tally_file_lines: int = 0

    def tallies(self) -> list[DestinationTally]:
        """What this log counted so far (in memory, ordered as :meth:`EgressTally.tallies`)."""
        return self._tally.tallies()

    def record(
        self,
        decision: str,
        kind: str,
        destination: str,
        reason: str,
        address: str | None = None,
    ) -> None:
        """Write one decision to the detail log and the tally (and a debug log event)."""
        now = round(time.time(), 3)
        destination = destination[:MAX_FIELD_CHARS]
        reason = reason[:MAX_FIELD_CHARS]
        log.debug(f"egress.{decision}", kind=kind, destination=destination)
        if self.path is None:
            return
        tally_line = self._tally.add(decision, kind, destination, reason, now)
        entry = {
            "time": now,
            "decision": decision,
            "kind": kind,
            "destination": destination,
            "address": address,
            "reason": reason,
        }
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        try:
            if self.path.exists() and self.path.stat().st_size + len(line) > MAX_LOG_BYTES:
                os.replace(self.path, self.path.with_name(LOG_NAME + ".1"))
            with open(self.path, "a", encoding="utf-8") as file:
                file.write(line)
            self._write_tally(tally_line)
        except OSError as exc:
            log.warning("egress.log_failed", path=str(self.path), reason=exc.strerror)
        self.on_record()

    def _write_tally(self, line: str) -> None:
        """Append the decision's tally line (a reader takes the last line of each
        destination); once the file holds :data:`TALLY_COMPACT_FACTOR` times the lines it
        needs, write it whole, then rename it into place: a decision costs one line, and
        ``sandbridge status`` never reads a half-written file (a torn last line is
        skipped, as any line that is not a tally)."""
        assert self.path is not None
        path = self.path.with_name(TALLY_NAME)
        needed = len(self._tally)
        if self._tally_file_lines and self._tally_file_lines < TALLY_COMPACT_FACTOR * needed:
            with open(path, "a", encoding="utf-8") as file:
                file.write(line)
            self._tally_file_lines += 1
            return
        scratch = self.path.with_name(TALLY_NAME + ".tmp")
        scratch.write_text(self._tally.text(), encoding="utf-8")
        os.replace(scratch, path)
        self._tally_file_lines = needed


def read_entries(directory: Path) -> list[dict[str, object]]:
    """The decisions logged in ``directory``, oldest first (unreadable lines skipped)."""
    entries: list[dict[str, object]] = []
    for name in (LOG_NAME + ".1", LOG_NAME):
        try:
            text = (directory / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            try:
                value = decode_json(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                entries.append(value)
    return entries


def tally(entries: list[dict[str, object]]) -> list[DestinationTally]:
    """The tallies of logged ``entries`` (as :class:`EgressTally` would have counted them)."""
    counted = EgressTally()
    for entry in entries:
        stamp = entry.get("time")
        counted.add(
            str(entry.get("decision")),
            str(entry.get("kind")),
            str(entry.get("destination")),
            str(entry.get("reason", "")),
            float(stamp) if isinstance(stamp, int | float) else 0.0,
        )
    return counted.tallies()


def _tally_of(value: object) -> DestinationTally | None:
    """A tally file line's tally, or None if it is not one."""
    if not isinstance(value, dict):
        return None
    try:
        found = DestinationTally(**value)
    except TypeError:
        return None
    texts = (found.decision, found.kind, found.destination, found.reason)
    if not all(isinstance(text, str) for text in texts) or type(found.count) is not int:
        return None
    if not all(isinstance(stamp, int | float) for stamp in (found.first, found.last)):
        return None
    return found


def read_tally(directory: Path) -> list[DestinationTally]:
    """The session's tally in ``directory``, ordered as :meth:`EgressTally.tallies`.

    A session that has no tally file (started by an older sandbridge) is tallied from
    its detail log, which may have rotated.
    """
    try:
        text = (directory / TALLY_NAME).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return tally(read_entries(directory))
    except OSError:
        return []
    found: dict[TallyKey, DestinationTally] = {}
    for line in text.splitlines():
        try:
            parsed = _tally_of(decode_json(line))
        except ValueError:
            continue
        if parsed is not None:  # a later line of a destination is its newer count
            found[(parsed.decision, parsed.kind, parsed.destination)] = parsed
    return sorted(found.values(), key=_order)


def summarise(tallies: list[DestinationTally]) -> list[str]:
    """``sandbridge status`` lines: totals, then each destination with its counts."""
    allowed = sum(t.count for t in tallies if t.decision == "allowed")
    refused = sum(t.count for t in tallies if t.decision == "refused")
    lines = [f"egress: {allowed} allowed, {refused} refused"]
    for t in tallies:
        first, last = (time.strftime("%H:%M:%S", time.localtime(s)) for s in (t.first, t.last))
        lines.append(
            f"  {t.decision:<8} {t.kind:<12} {t.destination}  x{t.count}  first {first}"
            f"  last {last}" + (f"  ({t.reason})" if t.decision == "refused" else "")
        )
    return lines
