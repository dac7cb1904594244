"""The session's ssh-agent decisions: a bounded detail log and per-key counts.

Each line of ``ssh-agent.jsonl``: ``{"time": ..., "decision": "signed"|"refused",
"key": "SHA256:...", "comment": "...", "for": "...", "reason": "..."}``: which key, and
what the signature was for as far as the signed data says (protocol/ssh_agent.py). The
data signed and the signature are never written. Past 1 MiB (``places/bridge_log.py``) the
file is renamed to ``ssh-agent.jsonl.1`` and a new one begins, as the egress log does.

``ssh-agent-counts.json`` holds what ``sandbridge status`` and the dashboard show: per
key, its confirmation mode (choice.py) and how many signatures were made and refused. It
is written whole (write, then rename) when the bridge starts and after each decision; it
names the chosen keys and one line for every other key the sandbox asked for, so the
sandbox cannot grow it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from sandbridge import log
from sandbridge.places.bridge_log import append_line, write_json
from sandbridge.protocol.jsonline import decode_json

LOG_NAME = "ssh-agent.jsonl"
COUNTS_NAME = "ssh-agent-counts.json"
# Where the requests for keys the owner did not choose are counted, whatever key.
OTHER_KEYS = "(keys not offered)"
# A counts file larger than this is not one sandbridge wrote.
MAX_COUNTS_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class KeyCount:
    """One key's signatures in this session."""

    key: str
    comment: str
    signed: int = 0
    refused: int = 0
    last: float = 0.0
    last_for: str = ""
    # When the owner is asked (choice.Confirm's value; "" for the keys not offered).
    mode: str = ""


class SignatureLog:
    """Writes the session's ssh-agent decisions into its session dir ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOG_NAME
        self.counts_path = directory / COUNTS_NAME
        self._counts: dict[str, KeyCount] = {}
        # Called after each decision (the registry's watchers, the dashboard).
        self.on_record: Callable[[], None] | None = None

    def chosen(self, keys: list[KeyCount]) -> None:
        """The keys the session offers, each with its mode and nothing counted yet: what
        ``status`` shows before the first signature."""
        for key in keys:
            self._counts.setdefault(key.key, key)
        self._write_counts()

    def record(  # noqa: PLR0913  (keyword-only: one line's fields)
        self, *, signed: bool, key: str, comment: str, offered: bool, signed_for: str, reason: str
    ) -> None:
        """Log one sign request's decision and count it under its key."""
        now = time.time()
        decision = "signed" if signed else "refused"
        line = json.dumps(
            {
                "time": now, "decision": decision, "key": key, "comment": comment,
                "for": signed_for, "reason": reason,
            }
        )  # fmt: skip
        log.info("ssh_agent.sign", decision=decision, key=key, signed_for=signed_for, reason=reason)
        self._append(line)
        name = key if offered else OTHER_KEYS
        before = self._counts.get(name, KeyCount(name, comment if offered else ""))
        self._counts[name] = KeyCount(
            name,
            before.comment,
            before.signed + signed,
            before.refused + (not signed),
            now,
            signed_for,
            before.mode,
        )
        self._write_counts()
        if self.on_record is not None:
            self.on_record()

    def counts(self) -> list[KeyCount]:
        """This session's counts, by key."""
        return sorted(self._counts.values(), key=lambda c: c.key)

    def _append(self, line: str) -> None:
        append_line(self.path, line, "ssh_agent.log_failed")

    def _write_counts(self) -> None:
        write_json(self.counts_path, [asdict(c) for c in self.counts()], "ssh_agent.counts_failed")


def read_counts(session_dir: Path) -> list[KeyCount]:
    """The counts a session's dir holds (none: the session offers no ssh-agent, or has
    signed nothing yet)."""
    try:
        data = (session_dir / COUNTS_NAME).read_bytes()[:MAX_COUNTS_BYTES]
        rows = decode_json(data)
    except (OSError, ValueError):
        return []
    if not isinstance(rows, list):
        return []
    counts = []
    for row in rows:
        try:
            counts.append(KeyCount(**row))
        except TypeError:
            continue
    return counts


def summarise(counts: list[KeyCount]) -> list[str]:
    """``sandbridge status``'s lines for the counts."""
    return [
        f"ssh-agent {c.key} {c.comment}"
        + (f" (mode {c.mode})" if c.mode else "")
        + f": {c.signed} signed, {c.refused} refused"
        + (f"; last: {c.last_for}" if c.last_for else "")
        for c in counts
    ]
