"""What the shim does with a connection from the host, decided from its first line.

The shim has two servers: the sandbox entry's light shim (:mod:`sandbridge.relay.inside.light_shim`,
no event loop), which serves handoffs and refusals, and the event loop's
(:mod:`sandbridge.relay.inside.shim`), which serves everything. Both read the first line with
the same limit and timeout, decide with :func:`decide` and answer with this module's
lines, so a first line gets the same answer whichever of them reads it.

Sans-I/O, and light on purpose: the light shim imports this module, so it imports
nothing beyond ``json`` and ``typing``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sandbridge.exceptions import WireError
from sandbridge.protocol import stream
from sandbridge.protocol.contract import V1_REQUEST_TYPE
from sandbridge.protocol.jsonline import decode_object, encode_failure, require_type
from sandbridge.protocol.limits import MAX_STREAM_OPEN_BYTES, MAX_V1_LINE_BYTES

# The host sends its first line at once; a connection silent this long is refused.
FIRST_LINE_TIMEOUT = 10.0
# Connecting to a loopback port either works or is refused at once.
APP_CONNECT_TIMEOUT = 5.0
# The longest first line: a v1 request, which carries a whole body.
MAX_FIRST_LINE_BYTES = MAX_V1_LINE_BYTES
# Beyond this many bytes without a newline, a first line cannot be one the light shim
# serves (a stream opening is a few dozen bytes): it goes to the event loop's shim,
# which takes up to MAX_FIRST_LINE_BYTES.
MAX_LIGHT_LINE_BYTES = MAX_STREAM_OPEN_BYTES


class Refuse(NamedTuple):
    """Write ``answer`` and close."""

    answer: bytes


class HandOff(NamedTuple):
    """Connect to the app on ``port`` and hand the connected socket to the host."""

    port: int


class Relay(NamedTuple):
    """Connect to the app on ``port`` and copy bytes both ways (a stream without a
    handoff: the host did not offer one, or sent more than its opening)."""

    port: int


class Exchange(NamedTuple):
    """One buffered v1 exchange, as ``message`` asks (not yet validated)."""

    message: dict[str, Any]


Decision = Refuse | HandOff | Relay | Exchange


def decide(line: bytes, rest: bytes, ended: bool) -> Decision:
    """What to do with the first ``line`` (without its newline); ``rest`` is what came
    after it, ``ended`` whether the host has closed its side.

    A handoff needs the connection to carry nothing but the opening: bytes after it
    would be lost with the shim's end of the connection, so they make it a relay."""
    try:
        message = decode_object(line, MAX_FIRST_LINE_BYTES)
    except WireError as exc:
        return refusal(str(exc))
    if message.get("type") == stream.STREAM_TYPE:
        try:
            opening = stream.decode_open(message)
        except WireError as exc:
            return Refuse(stream.encode_ack(str(exc)))
        if opening.handoff and not rest and not ended:
            return HandOff(opening.port)
        return Relay(opening.port)
    try:
        require_type(message, V1_REQUEST_TYPE)
    except WireError as exc:
        return refusal(str(exc))
    return Exchange(message)


def refusal(reason: str) -> Refuse:
    """The refusal of a first line that never came whole (too long, timed out, cut
    short) or is not a request."""
    return Refuse(encode_failure(reason))


def connect_failed(error: str) -> bytes:
    """The stream answer when the app's port took no connection on any of its loopback
    addresses: ``error`` is :attr:`.app_address.AppAttempts.error`, naming each one tried."""
    return stream.encode_ack(error)
