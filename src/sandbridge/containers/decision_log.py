"""The session's container engine decisions: a bounded detail log and the counts shown.

Each line of ``containers.jsonl``: ``{"time": ..., "decision": "allowed"|"refused",
"endpoint": "container-create", "method": "POST", "object": "...", "field": "...",
"rule": "...", "reason": "..."}``: the table's row (endpoints.py), the object named (an
image, a container's id) and, for a refusal, the field and rule. Request bodies (a
container's environment may hold secrets) and the streams are never written. Past 1 MiB
(``places/bridge_log.py``) the file is renamed to ``containers.jsonl.1`` and a new one
begins.

``containers-counts.json`` holds what ``sandbridge status`` and the dashboard show:
requests allowed and refused, containers created, and the last refusal. It is written
whole (write, then rename) after each decision; its size does not grow with the requests.
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

LOG_NAME = "containers.jsonl"
COUNTS_NAME = "containers-counts.json"
# A counts file larger than this is not one sandbridge wrote.
MAX_COUNTS_BYTES = 4096
# What a line keeps of a value the sandbox chose (an object's name, a refusal's detail).
MAX_SHOWN_CHARS = 200


@dataclass(frozen=True, slots=True)
class ContainerCounts:
    """A session's container engine requests so far."""

    allowed: int = 0
    refused: int = 0
    created: int = 0
    last: float = 0.0
    last_refused: str = ""


def shown(text: str) -> str:
    """``text`` as one printable line, at most :data:`MAX_SHOWN_CHARS`: every control,
    format or separator character (ESC, newlines, bidi overrides) becomes ``?``. The
    sandbox chooses names, labels and parameters that refusals quote, and ``sandbridge
    status`` prints them on the owner's terminal."""
    return "".join(c if c.isprintable() else "?" for c in text[:MAX_SHOWN_CHARS])


class DecisionLog:
    """Writes the session's container engine decisions into its session dir ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOG_NAME
        self.counts_path = directory / COUNTS_NAME
        self.counts = ContainerCounts()
        # Called after each decision (the registry's watchers, the dashboard).
        self.on_record: Callable[[], None] | None = None

    def record(  # noqa: PLR0913  (keyword-only: one line's fields)
        self,
        *,
        allowed: bool,
        endpoint: str,
        method: str,
        name: str = "",
        field: str = "",
        rule: str = "",
        reason: str = "",
        created: bool = False,
    ) -> None:
        """Log one request's decision (never its body) and count it."""
        now = time.time()
        decision = "allowed" if allowed else "refused"
        name, field, reason = shown(name), shown(field), shown(reason)
        line = json.dumps(
            {
                "time": now,
                "decision": decision,
                "endpoint": endpoint,
                "method": method,
                "object": name,
                "field": field,
                "rule": rule,
                "reason": reason,
            }
        )
        log.info("containers.request", decision=decision, endpoint=endpoint, field=field, rule=rule)
        append_line(self.path, line, "containers.log_failed")
        c = self.counts
        self.counts = replace(
            c,
            allowed=c.allowed + allowed,
            refused=c.refused + (not allowed),
            created=c.created + created,
            last=now,
            last_refused=c.last_refused if allowed else f"{endpoint}: {field} ({rule})",
        )
        write_json(self.counts_path, asdict(self.counts), "containers.counts_failed")
        if self.on_record is not None:
            self.on_record()


def read_counts(session_dir: Path) -> ContainerCounts | None:
    """The counts a session's dir holds (None: no request yet, or no bridge)."""
    try:
        row = decode_json((session_dir / COUNTS_NAME).read_bytes()[:MAX_COUNTS_BYTES])
        return ContainerCounts(**row) if isinstance(row, dict) else None
    except (OSError, ValueError, TypeError):
        return None


def summarise(counts: ContainerCounts | None) -> list[str]:
    """``sandbridge status``'s line for the counts."""
    if counts is None:
        return []
    line = (
        f"containers: {counts.allowed} requests allowed, {counts.refused} refused; "
        f"{counts.created} containers created"
    )
    if counts.last_refused:
        line += f"; last refused: {shown(counts.last_refused)}"
    return [line]
