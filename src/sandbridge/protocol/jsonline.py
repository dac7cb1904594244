"""One JSON object per line: the framing of every message on the Unix sockets, and the
one JSON loader for everything that comes from an untrusted side.

:class:`LineReader` is sans-I/O: feed it bytes, it returns the first complete line,
or ``None`` while the line is still incomplete, and refuses a line past its limit
before buffering it.

:func:`decode_json` is the only way sandbridge parses JSON it did not write itself in
this process (registrations, v1 answers, stream openings, egress and terminal control
messages, records read back from the runtime and state dirs). Threat: Python's
``json`` recurses once per nesting level, so ``[[[[...`` 100,000 levels deep raises
``RecursionError`` (a traceback, or a handler that dies) instead of a refusal. Defence:
before parsing, a linear scan of the bracket structure outside strings refuses
anything nested deeper than :data:`MAX_JSON_DEPTH` (and anything larger than the
caller's byte limit); ``RecursionError`` is caught as well, should the scan ever miss.
Every refusal is a :class:`~sandbridge.exceptions.JsonRefused` (a ``WireError`` and a
``ValueError``), which wire handlers answer with ``{"ok":false,"error":"..."}``.
"""

from __future__ import annotations

import json
import math

from sandbridge.exceptions import JsonRefused, WireError

# typing costs a thin client (cli/thin_run.py) more than the rest of this module: the
# annotations need it only when checked.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Deepest nesting accepted. sandbridge's own messages are at most 3 levels deep (a v1
# answer's header pairs); 32 leaves room for any future field and stays far below the
# depth at which Python's parser recurses out of its stack (about 1,000).
MAX_JSON_DEPTH = 32
# Byte limit of decode_json when the caller names none: every message and record
# sandbridge reads is far smaller (v1 lines, the exception, pass their own limit).
MAX_JSON_BYTES = 1024 * 1024

_OPENERS = (b"[", b"{")
# Only brackets survive the structure scan; braces count as brackets (a mismatch is
# the parser's to refuse, the depth is the same).
_BRACKETS_ONLY = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")


def nesting_refusal(data: bytes, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Why ``data`` nests too deeply to be parsed, or ``None`` if it does not.

    Linear in ``len(data)`` and never recursive: strings are cut out (escaped
    backslashes and quotes first, so a quote inside a string cannot end it), what is
    left is reduced to its brackets, and innermost ``[]`` pairs are removed one level
    per pass; anything left after ``max_depth`` passes is deeper (or unbalanced).
    """
    if data.count(_OPENERS[0]) + data.count(_OPENERS[1]) <= max_depth:
        return None  # too few brackets to nest deeper, whatever the strings hold
    unescaped = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside_strings = b"".join(unescaped.split(b'"')[::2])
    structure = outside_strings.translate(_BRACKETS_ONLY, _NOT_BRACKETS)
    for _ in range(max_depth):
        reduced = structure.replace(b"[]", b"")
        if reduced == structure:  # no innermost pair left: unbalanced
            return "its brackets are unbalanced" if structure else None
        structure = reduced
    if not structure:
        return None
    return f"it is nested deeper than {max_depth} levels"


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is out of range")
    return value


# One decoder for every call: json.loads with hooks builds a new one each time (a
# journal's read decodes 256 records). Its twin test: test_untrusted_json.py.
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def decode_json(
    data: bytes | str, *, max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH
) -> Any:
    """Parse JSON from an untrusted side, refusing (:class:`JsonRefused`) instead of
    recursing or buffering without bound. ``NaN``, ``Infinity`` and numbers beyond a
    float's range are refused too: Python's parser takes them, but they are not JSON,
    compare false with every bound, and a value kept and sent on (a terminal request's
    ``created`` in the dashboard's tables) made JSON no browser parses."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > max_bytes:
        raise JsonRefused(f"message is not accepted: it is longer than {max_bytes} bytes")
    why = nesting_refusal(raw, max_depth)
    if why is not None:
        raise JsonRefused(f"message is not accepted: {why}")
    try:
        # (as json.loads reads bytes: UTF-8, -16 or -32 as their first bytes say)
        return _DECODER.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise JsonRefused(f"message is not valid JSON: {exc}") from None
    except RecursionError:
        raise JsonRefused("message is not accepted: it is nested too deeply") from None


class LineReader:
    """Collects bytes until the first newline, never more than ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._buffer = bytearray()
        self._line: bytes | None = None
        self.rest = b""

    def feed(self, data: bytes) -> bytes | None:
        """Add ``data``; return the line (without its newline) once complete."""
        if self._line is not None:
            self.rest += data
            return self._line
        end = data.find(b"\n")
        if end < 0:
            if len(self._buffer) + len(data) > self._max_bytes:
                raise WireError(f"message longer than {self._max_bytes} bytes")
            self._buffer += data
            return None
        if len(self._buffer) + end > self._max_bytes:
            raise WireError(f"message longer than {self._max_bytes} bytes")
        self._buffer += data[:end]
        self.rest = data[end + 1 :]
        self._line = bytes(self._buffer)
        self._buffer = bytearray()
        return self._line

    def feed_eof(self) -> bytes:
        """The peer closed its side: what was buffered is the whole message."""
        if self._line is not None:
            return self._line
        if not self._buffer:
            raise WireError("connection closed before a message was sent")
        self._line = bytes(self._buffer)
        return self._line


def decode_object(line: bytes, max_bytes: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """Parse one JSON object (:func:`decode_json`), refusing anything else."""
    value = decode_json(line, max_bytes=max_bytes)
    if not isinstance(value, dict):
        raise JsonRefused(f"message must be a JSON object, got {type(value).__name__}")
    return value


def encode_object(value: dict[str, Any]) -> bytes:
    """Serialise one JSON object as a compact line ending in a newline."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"


def require_type(message: dict[str, Any], expected: str) -> None:
    """Refuse (:class:`WireError`) a message whose ``type`` is not ``expected``, naming
    the type it has (cut to 80 characters: it is the peer's)."""
    if message.get("type") != expected:
        raise WireError(f"type must be {expected!r}, got {message.get('type')!r:.80}")


def encode_failure(error: str) -> bytes:
    """The contract's failure answer, ``{"ok":false,"error":"..."}`` (v1's, and the
    shim's refusal of a first line it cannot serve)."""
    return encode_object({"ok": False, "error": error})
