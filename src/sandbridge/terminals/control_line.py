"""The session's side of its control socket's lines: one JSON object in, one JSON answer
out (``{"ok": true, ...}`` or ``{"ok": false, "code": ..., "error": ...}``).

The client's side is :mod:`sandbridge.terminals.control`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from sandbridge.exceptions import ControlRefusal
from sandbridge.protocol.jsonline import decode_json

# A control request is one short JSON line (a signed document is at most 4 KiB).
MAX_CONTROL_LINE = 16 * 1024


async def read_message(reader: asyncio.StreamReader) -> dict[str, Any]:
    """The next control line as a JSON object; :class:`ControlRefusal` ``too_long`` or
    ``malformed`` otherwise."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise ControlRefusal(
            "too_long", f"a control line is limited to {MAX_CONTROL_LINE} bytes"
        ) from None
    try:
        message = decode_json(line, max_bytes=MAX_CONTROL_LINE)
    except ValueError:  # JsonRefused too: deep nesting ([[[...) is refused, not a traceback
        raise ControlRefusal("malformed", "a control line must be one JSON object") from None
    if not isinstance(message, dict):
        raise ControlRefusal("malformed", "a control line must be one JSON object")
    return message


def write_message(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    """Queue one answer line (the caller drains)."""
    writer.write(json.dumps(message).encode() + b"\n")


def refusal_line(code: str, error: str) -> bytes:
    """A whole refusal answer line, for a relay that answers in the broker's place."""
    return json.dumps({"ok": False, "code": code, "error": error}).encode() + b"\n"
