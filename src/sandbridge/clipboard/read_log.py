"""The session's clipboard transfers: a bounded detail log and the counts shown.

Each line of ``clipboard.jsonl``: ``{"time": ..., "op": "read"|"write"|"types",
"decision": "allowed"|"refused", "type": "...", "size": N, "reason": "..."}``. The
content is never written. Past 1 MiB (``places/bridge_log.py``) the file is renamed to
``clipboard.jsonl.1`` and a new one begins, as the egress log does.

``clipboard-counts.json`` holds what ``sandbridge status`` and the dashboard show: reads
and writes made and refused, and the last transfer. It is written whole (write, then
rename) after each decision; its size does not grow with the sandbox's requests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from sandbridge import log
from sandbridge.places.bridge_log import append_line, write_json
from sandbridge.protocol.jsonline import decode_json

LOG_NAME = "clipboard.jsonl"
COUNTS_NAME = "clipboard-counts.json"
# A counts file larger than this is not one sandbridge wrote.
MAX_COUNTS_BYTES = 4096


@dataclass(frozen=True, slots=True)
class ClipboardCounts:
    """A session's clipboard transfers so far."""

    reads: int = 0
    reads_refused: int = 0
    writes: int = 0
    writes_refused: int = 0
    last: float = 0.0
    last_op: str = ""
    last_type: str = ""
    last_size: int = 0


class TransferLog:
    """Writes the session's clipboard decisions into its session dir ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOG_NAME
        self.counts_path = directory / COUNTS_NAME
        self.counts = ClipboardCounts()
        # Called after each decision (the registry's watchers, the dashboard).
        self.on_record: Callable[[], None] | None = None

    def record(self, *, op: str, allowed: bool, kind: str, size: int, reason: str) -> None:
        """Log one request's decision (never its content) and count it."""
        now = time.time()
        decision = "allowed" if allowed else "refused"
        line = json.dumps(
            {"time": now, "op": op, "decision": decision, "type": kind, "size": size,
             "reason": reason}
        )  # fmt: skip
        log.info("clipboard.transfer", op=op, decision=decision, type=kind, size=size)
        self._append(line)
        c = self.counts
        if op == "write":
            c = replace(
                c, writes=c.writes + allowed, writes_refused=c.writes_refused + (not allowed)
            )
        else:
            c = replace(c, reads=c.reads + allowed, reads_refused=c.reads_refused + (not allowed))
        self.counts = replace(c, last=now, last_op=op, last_type=kind, last_size=size)
        self._write_counts()
        if self.on_record is not None:
            self.on_record()

    def _append(self, line: str) -> None:
        append_line(self.path, line, "clipboard.log_failed")

    def _write_counts(self) -> None:
        write_json(self.counts_path, asdict(self.counts), "clipboard.counts_failed")


def read_counts(session_dir: Path) -> ClipboardCounts | None:
    """The counts a session's dir holds (None: no clipboard transfer yet, or no bridge)."""
    try:
        row = decode_json((session_dir / COUNTS_NAME).read_bytes()[:MAX_COUNTS_BYTES])
        return ClipboardCounts(**row) if isinstance(row, dict) else None
    except (OSError, ValueError, TypeError):
        return None


def summarise(counts: ClipboardCounts | None) -> list[str]:
    """``sandbridge status``'s line for the counts."""
    if counts is None:
        return []
    line = (
        f"clipboard: {counts.reads} read, {counts.reads_refused} refused; "
        f"{counts.writes} written, {counts.writes_refused} refused"
    )
    if counts.last_op:
        line += f"; last: {counts.last_op} {counts.last_type} {counts.last_size} bytes"
    return [line]
