"""The session's egress decisions, as JSON lines in its host-only directory.

Each line: ``{"time": ..., "decision": "allowed"|"refused", "kind": "host-service"|"proxy",
"destination": "HOST:PORT", "address": "IP"|null, "reason": "..."}``. No payload, no
header, no credential is ever written. The file is bounded: past :data:`MAX_LOG_BYTES`
it is renamed to ``egress.jsonl.1`` (replacing the previous one) and a new one begins,
so a sandbox that hammers refused destinations costs the host at most twice that.
``sandbridge status`` reads both.
"""

from __future__ import annotations

import collections
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from sandbridge import log

LOG_NAME = "egress.jsonl"
# 1 MiB holds ~5000 decisions: days of a normal session; a flood rotates instead of growing.
MAX_LOG_BYTES = 1024 * 1024
# Reasons are written by sandbridge, but they quote hostile names: cap what one line holds.
MAX_FIELD_CHARS = 300


@dataclass
class EgressLog:
    """Appends decisions to ``path`` (``None``: log nowhere, e.g. ``sandbridge host``)."""

    path: Path | None

    def record(
        self,
        decision: str,
        kind: str,
        destination: str,
        reason: str,
        address: str | None = None,
    ) -> None:
        """Write one decision (and a debug log event)."""
        entry = {
            "time": round(time.time(), 3),
            "decision": decision,
            "kind": kind,
            "destination": destination[:MAX_FIELD_CHARS],
            "address": address,
            "reason": reason[:MAX_FIELD_CHARS],
        }
        log.debug(f"egress.{decision}", kind=kind, destination=entry["destination"])
        if self.path is None:
            return
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        try:
            if self.path.exists() and self.path.stat().st_size + len(line) > MAX_LOG_BYTES:
                os.replace(self.path, self.path.with_name(LOG_NAME + ".1"))
            with open(self.path, "a", encoding="utf-8") as file:
                file.write(line)
        except OSError as exc:
            log.warning("egress.log_failed", path=str(self.path), reason=exc.strerror)


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
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                entries.append(value)
    return entries


@dataclass(frozen=True, slots=True)
class DestinationTally:
    """How often one destination was allowed or refused, and when last."""

    decision: str
    kind: str
    destination: str
    count: int
    last: float
    reason: str


def tally(entries: list[dict[str, object]]) -> list[DestinationTally]:
    """One tally per (decision, kind, destination), refusals first, then by destination."""
    counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
    reasons: dict[tuple[str, str, str], str] = {}
    last: dict[tuple[str, str, str], float] = {}
    for entry in entries:
        key = (str(entry.get("decision")), str(entry.get("kind")), str(entry.get("destination")))
        counts[key] += 1
        reasons[key] = str(entry.get("reason", ""))
        stamp = entry.get("time")
        last[key] = float(stamp) if isinstance(stamp, int | float) else 0.0
    return [
        DestinationTally(*key, counts[key], last[key], reasons[key])
        for key in sorted(counts, key=lambda k: (k[0] != "refused", k[2]))
    ]


def summarise(entries: list[dict[str, object]]) -> list[str]:
    """``sandbridge status`` lines: totals, then each destination with its counts."""
    tallies = tally(entries)
    allowed = sum(t.count for t in tallies if t.decision == "allowed")
    refused = sum(t.count for t in tallies if t.decision == "refused")
    lines = [f"egress: {allowed} allowed, {refused} refused"]
    for t in tallies:
        when = time.strftime("%H:%M:%S", time.localtime(t.last))
        lines.append(
            f"  {t.decision:<8} {t.kind:<12} {t.destination}  x{t.count}  last {when}"
            + (f"  ({t.reason})" if t.decision == "refused" else "")
        )
    return lines
