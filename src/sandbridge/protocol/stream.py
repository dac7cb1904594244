"""Stream mode: sandbridge's own use of ``upstream.sock``.

The host opens one Unix connection per browser connection and sends one line::

    {"type":"http_stream","version":1,"port":4173}

The shim connects to the app on port 4173 (``127.0.0.1``, else ``::1``:
:mod:`sandbridge.protocol.app_address`) and answers ``{"ok":true,"stream":1}`` (or
``{"ok":false,"stream":1,"error":"..."}``). From then on the connection carries the
HTTP/1.1 bytes between host and app unchanged in both directions, so bodies, SSE and
WebSocket frames stream with no framing of ours on top. A peer that answers without
the ``stream`` field speaks only v1, and the host falls back to v1 for it.

Connection handoff (sandbridge's own, optional): the host may add ``"handoff":1`` to
its opening. A shim that supports it connects to the app as before and then, instead
of relaying, sends its answer ``{"ok":true,"stream":1,"handoff":1}`` with the connected
TCP socket attached (``SCM_RIGHTS``) and closes its end: the host then talks to the app
directly and the shim leaves the data path. A shim that ignores the field answers a
plain acknowledgement and relays bytes as above, so either side can be older.
"""

from __future__ import annotations

from typing import NamedTuple

from sandbridge.exceptions import NotStreamCapable, WireError
from sandbridge.protocol.jsonline import decode_object, encode_object, require_type
from sandbridge.protocol.port import validate_port

STREAM_TYPE = "http_stream"
STREAM_VERSION = 1
HANDOFF_VERSION = 1

# Named tuples, not dataclasses: the sandbox entry's light shim decodes openings, and
# ``dataclasses`` (with ``inspect``) would be over a MiB of its memory.


class StreamAck(NamedTuple):
    """The shim's answer to a stream opening."""

    ok: bool
    error: str = ""
    handoff: bool = False  # the answer came with the app's socket attached


class StreamOpen(NamedTuple):
    """A validated opening: the app port, and whether the host accepts a handoff."""

    port: int
    handoff: bool = False


def encode_open(port: int, handoff: bool = False) -> bytes:
    """The opening line the host sends."""
    message: dict[str, object] = {"type": STREAM_TYPE, "version": STREAM_VERSION, "port": port}
    if handoff:
        message["handoff"] = HANDOFF_VERSION
    return encode_object(message)


def decode_open(message: dict[str, object]) -> StreamOpen:
    """Validate an already-decoded opening."""
    require_type(message, STREAM_TYPE)
    if message.get("version") != STREAM_VERSION:
        raise WireError(f"unsupported stream version {message.get('version')!r:.80}")
    port = validate_port(message.get("port"))
    return StreamOpen(port, handoff=message.get("handoff") == HANDOFF_VERSION)


def encode_ack(error: str | None = None, handoff: bool = False) -> bytes:
    """The shim's answer: success (with the app's socket attached if ``handoff``), or a
    failure naming what went wrong."""
    if error is None:
        if handoff:
            return encode_object({"ok": True, "stream": STREAM_VERSION, "handoff": HANDOFF_VERSION})
        return encode_object({"ok": True, "stream": STREAM_VERSION})
    return encode_object({"ok": False, "stream": STREAM_VERSION, "error": error})


def decode_ack(line: bytes) -> StreamAck:
    """Decode the shim's answer; :class:`NotStreamCapable` if the peer is v1-only."""
    message = decode_object(line)
    if message.get("stream") != STREAM_VERSION:
        raise NotStreamCapable("upstream shim does not speak stream mode")
    if message.get("ok") is True:
        return StreamAck(ok=True, handoff=message.get("handoff") == HANDOFF_VERSION)
    error = message.get("error")
    return StreamAck(ok=False, error=str(error)[:200] if error is not None else "unknown error")
