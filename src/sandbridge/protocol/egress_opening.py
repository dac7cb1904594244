"""The egress opening on ``egress.sock``: the gate listener names the gate port it accepted on.

Sandbox to host, one line: ``{"type":"egress","port":5432}``. Host to sandbox, one line:
``{"ok":true}`` then the connection carries raw bytes both ways (to the host service, or
HTTP to and from the egress proxy), or ``{"ok":false,"error":"..."}`` and the end.
The host decides what the port means from its own policy; the line is only a request.

An egress request (``sandbridge-allow``) is another first line on the same socket:
``{"type":"egress_request","destination":"other.test:80","reason":"...","wait":true}``.
The host answers one line (:func:`encode_reply`): the request's id and state, or a
refusal with a ``code``; with ``"wait":true`` it keeps the connection and sends a second
line once the owner decides. docs/contract.md has the fields and every refusal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbridge.exceptions import WireError
from sandbridge.protocol.jsonline import decode_object, encode_object
from sandbridge.protocol.port import validate_port

# The opening is a tiny JSON object; a longer line is not from a gate listener.
MAX_EGRESS_OPEN_BYTES = 256
# The first line of any connection to egress.sock: an opening, or a request whose reason
# may be 500 characters, each up to 12 bytes once JSON-escaped (a surrogate pair).
MAX_EGRESS_LINE_BYTES = 8 * 1024
# The gate listener sends its line as soon as it connects.
EGRESS_OPEN_TIMEOUT = 5.0


def encode_open(port: int) -> bytes:
    """The line the in-sandbox gate listener sends for a connection to gate port ``port``."""
    return encode_object({"type": "egress", "port": port})


def decode_open(line: bytes) -> int:
    """Validate an opening line; return the gate port it names."""
    message = decode_object(line)
    if message.get("type") != "egress":
        raise WireError(f"type must be 'egress', got {message.get('type')!r:.80}")
    return validate_port(message.get("port"))


@dataclass(frozen=True, slots=True)
class EgressAsk:
    """An egress request as sent: its fields unchecked (egress/requests.py checks them)."""

    destination: object
    reason: object
    wait: bool


def encode_request(destination: str, reason: str, wait: bool) -> bytes:
    """The line ``sandbridge-allow`` sends."""
    return encode_object(
        {"type": "egress_request", "destination": destination, "reason": reason, "wait": wait}
    )


def decode_opening(line: bytes) -> int | EgressAsk:
    """The first line on ``egress.sock``: a gate port (an opening) or an egress request."""
    message = decode_object(line, MAX_EGRESS_LINE_BYTES)
    kind = message.get("type")
    if kind == "egress_request":
        wait = message.get("wait", False)
        if not isinstance(wait, bool):
            raise WireError(f"wait must be true or false, got {wait!r:.80}")
        return EgressAsk(message.get("destination"), message.get("reason"), wait)
    if kind != "egress":
        raise WireError(f"type must be 'egress' or 'egress_request', got {kind!r:.80}")
    return validate_port(message.get("port"))


def encode_reply(fields: dict[str, Any]) -> bytes:
    """One answer line to an egress request (``ok`` and the fields given)."""
    return encode_object(fields)


def decode_reply(line: bytes) -> dict[str, Any]:
    """An answer to an egress request, as ``sandbridge-allow`` reads it."""
    return decode_object(line, MAX_EGRESS_LINE_BYTES)


def encode_answer(error: str | None = None) -> bytes:
    """The host's answer to an opening."""
    return encode_object({"ok": True} if error is None else {"ok": False, "error": error})


def decode_answer(line: bytes) -> str | None:
    """``None`` if the host accepted, else its error."""
    message = decode_object(line)
    if message.get("ok") is True:
        return None
    return str(message.get("error", "refused"))[:500]
