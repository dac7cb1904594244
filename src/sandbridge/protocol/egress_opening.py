"""The egress opening on ``egress.sock``: the gate listener names the gate port it accepted on.

Sandbox to host, one line: ``{"type":"egress","port":5432}``. Host to sandbox, one line:
``{"ok":true}`` then the connection carries raw bytes both ways (to the host service, or
HTTP to and from the egress proxy), or ``{"ok":false,"error":"..."}`` and the end.
The host decides what the port means from its own policy; the line is only a request.
"""

from __future__ import annotations

from sandbridge.exceptions import WireError
from sandbridge.protocol.jsonline import decode_object, encode_object
from sandbridge.protocol.registration import validate_port

# The opening is a tiny JSON object; a longer line is not from a gate listener.
MAX_EGRESS_OPEN_BYTES = 256
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


def encode_answer(error: str | None = None) -> bytes:
    """The host's answer to an opening."""
    return encode_object({"ok": True} if error is None else {"ok": False, "error": error})


def decode_answer(line: bytes) -> str | None:
    """``None`` if the host accepted, else its error."""
    message = decode_object(line)
    if message.get("ok") is True:
        return None
    return str(message.get("error", "refused"))[:500]
