"""One JSON object per line: the framing of every message on the Unix sockets.

:class:`LineReader` is sans-I/O: feed it bytes, it returns the first complete line,
or ``None`` while the line is still incomplete, and refuses a line past its limit
before buffering it.
"""

from __future__ import annotations

import json
from typing import Any

from sandbridge.exceptions import WireError


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


def decode_object(line: bytes) -> dict[str, Any]:
    """Parse one JSON object, refusing anything else with a clear message."""
    try:
        value = json.loads(line)
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError(f"message is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise WireError(f"message must be a JSON object, got {type(value).__name__}")
    return value


def encode_object(value: dict[str, Any]) -> bytes:
    """Serialise one JSON object as a compact line ending in a newline."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"
