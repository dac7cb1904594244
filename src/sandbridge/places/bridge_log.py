"""A bridge's record in its session's dir (the ssh agent's signatures, the clipboard's
transfers): one JSON line a use, appended, and the counts, rewritten whole, both 0600.

Both are written as the bridge serves and read by ``sandbridge status`` and the dashboard;
a write that fails (the session dir gone at teardown) is logged at debug and costs the
bridge nothing: the counts in memory still hold.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sandbridge import log

# A session's log, rotated once past this (the last two kept): a bridge used without
# pause for a week still fits, and a sandbox that floods it cannot fill the disk.
MAX_LOG_BYTES = 1024 * 1024


def append_line(path: Path, line: str, event: str) -> None:
    """Append ``line`` to the log at ``path``, moved to ``NAME.1`` first once past
    :data:`MAX_LOG_BYTES`; a failure is logged as ``event``."""
    try:
        if path.exists() and path.stat().st_size > MAX_LOG_BYTES:
            os.replace(path, path.with_name(path.name + ".1"))
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "a") as out:
            out.write(line + "\n")
    except OSError as exc:
        log.debug(event, error=str(exc))


def write_json(path: Path, value: object, event: str) -> None:
    """Replace the file at ``path`` with ``value`` as JSON, whole (written beside it, then
    renamed); a failure is logged as ``event``."""
    temporary = path.with_name(path.name + ".new")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(value, out)
        os.replace(temporary, path)
    except OSError as exc:
        log.debug(event, error=str(exc))
