"""The sandbox's clipboard socket, sans-I/O (docs/clipboard.md).

One request per connection. The client sends one JSON line, then for a write exactly
``size`` bytes; the host answers one JSON line, then for a read exactly ``size`` bytes::

    {"op":"read","type":"text/plain"}     -> {"ok":true,"type":"text/plain","size":5} + 5 bytes
    {"op":"write","type":"image/png","size":N} + N bytes -> {"ok":true}
    {"op":"types"}                        -> {"ok":true,"types":["text/plain"]}
    anything refused                      -> {"ok":false,"error":"..."}

Only :data:`TYPES` cross, each under its own cap (:data:`MAX_BYTES`); a PNG must start
with the PNG signature and a text must be UTF-8 (:func:`content_refusal`). Everything
here is checked the same way on both sides: the host trusts no size, type or byte the
sandbox sends, and the stand-ins inside trust the host's answer no further than its
declared size.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbridge.exceptions import WireError
from sandbridge.protocol.jsonline import decode_object, encode_object

TEXT = "text/plain"
PNG = "image/png"
TYPES = (TEXT, PNG)
# A text someone copies (a stack trace, a file) is far under 1 MiB; a screenshot of a
# 4K screen as PNG is a few MiB, 16 MiB holds the largest. Past these, a clipboard
# transfer is not what the owner meant to hand over, and the host holds one whole
# body per connection (the owner's tools take and give it whole), so the caps bound it.
MAX_BYTES = {TEXT: 1024 * 1024, PNG: 16 * 1024 * 1024}
# The header line: {"op":"write","type":"image/png","size":16777216} is under 60 bytes.
MAX_HEADER_BYTES = 256
# The PNG file signature (PNG specification §5.2).
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
READ = "read"
WRITE = "write"
LIST_TYPES = "types"
OPS = (READ, WRITE, LIST_TYPES)


@dataclass(frozen=True, slots=True)
class ClipboardRequest:
    """One request: ``op`` of :data:`OPS`; ``type`` of :data:`TYPES` (empty for
    ``types``); ``size`` the bytes that follow (a write's only)."""

    op: str
    type: str = ""
    size: int = 0


@dataclass(frozen=True, slots=True)
class ClipboardAnswer:
    """The host's answer: ``ok`` with the ``type`` and ``size`` of a read's bytes, or
    the ``types`` on offer; or not ``ok`` with its ``error``."""

    ok: bool
    type: str = ""
    size: int = 0
    types: tuple[str, ...] = ()
    error: str = ""


def _shown(value: object) -> str:
    """A peer's value in a refusal: its repr, cut to 80 characters."""
    return f"{value!r:.80}"


def _type_of(message: dict[str, object]) -> str:
    kind = message.get("type")
    if kind not in TYPES:
        raise WireError(f"type {_shown(kind)} is not served; only {', '.join(TYPES)}")
    assert isinstance(kind, str)
    return kind


def _size_of(message: dict[str, object], kind: str) -> int:
    size = message.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise WireError(f"size {_shown(size)} is not a byte count")
    if size > MAX_BYTES[kind]:
        raise WireError(f"size {size} is over the {MAX_BYTES[kind]} bytes of {kind}")
    return size


def parse_request(line: bytes) -> ClipboardRequest:
    """The request of a header ``line`` (without its newline); refuses (:class:`WireError`)
    an unknown op or type, a missing or oversize size, and any other field."""
    message = decode_object(line, max_bytes=MAX_HEADER_BYTES)
    op = message.get("op")
    if op not in OPS:
        raise WireError(f"op {_shown(op)} is not served; only {', '.join(OPS)}")
    allowed = {"op"} | ({"type"} if op == READ else {"type", "size"} if op == WRITE else set())
    extra = sorted(set(message) - allowed)
    if extra:
        raise WireError(f"field {_shown(extra[0])} is not part of a {op} request")
    if op == LIST_TYPES:
        return ClipboardRequest(LIST_TYPES)
    kind = _type_of(message)
    if op == READ:
        return ClipboardRequest(READ, kind)
    return ClipboardRequest(WRITE, kind, _size_of(message, kind))


def encode_request(request: ClipboardRequest) -> bytes:
    """The header line of ``request`` (the client's)."""
    if request.op == LIST_TYPES:
        return encode_object({"op": LIST_TYPES})
    if request.op == READ:
        return encode_object({"op": READ, "type": request.type})
    return encode_object({"op": WRITE, "type": request.type, "size": request.size})


def encode_answer(answer: ClipboardAnswer) -> bytes:
    """The header line of ``answer`` (the host's)."""
    if not answer.ok:
        return encode_object({"ok": False, "error": answer.error})
    if answer.types:
        return encode_object({"ok": True, "types": list(answer.types)})
    if answer.type:
        return encode_object({"ok": True, "type": answer.type, "size": answer.size})
    return encode_object({"ok": True})


def parse_answer(line: bytes) -> ClipboardAnswer:
    """The answer of a header ``line`` from the host (refused like a request's)."""
    message = decode_object(line, max_bytes=MAX_HEADER_BYTES * 4)
    if message.get("ok") is not True:
        error = message.get("error")
        return ClipboardAnswer(False, error=error if isinstance(error, str) else "refused")
    if "types" in message:
        types = message["types"]
        if not isinstance(types, list) or not all(t in TYPES for t in types):
            raise WireError(f"types {_shown(types)} is not a list of served types")
        return ClipboardAnswer(True, types=tuple(types))
    if "type" not in message:
        return ClipboardAnswer(True)
    kind = _type_of(message)
    return ClipboardAnswer(True, kind, _size_of(message, kind))


def content_refusal(kind: str, data: bytes) -> str | None:
    """Why ``data`` is not a ``kind`` that may cross (None: it may): over its cap, a PNG
    without the PNG signature, a text that is not UTF-8."""
    if len(data) > MAX_BYTES[kind]:
        return f"{len(data)} bytes of {kind} are over its cap of {MAX_BYTES[kind]} bytes"
    if kind == PNG and not data.startswith(PNG_SIGNATURE):
        return f"the bytes given as {PNG} do not start with the PNG signature"
    if kind == TEXT:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"the text is not UTF-8 (byte {exc.start}: {data[exc.start : exc.start + 1]!r})"
    return None


class BodyReader:
    """Collects exactly ``size`` bytes: refuses more (a size that lies short) and, at the
    end of input, fewer (a size that lies long)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data = bytearray()

    @property
    def complete(self) -> bool:
        """Whether all ``size`` bytes have arrived."""
        return len(self._data) == self.size

    def feed(self, data: bytes) -> None:
        """Add ``data``; refuse bytes past the declared size."""
        if len(self._data) + len(data) > self.size:
            raise WireError(f"more bytes than the declared size of {self.size}")
        self._data += data

    def finish(self) -> bytes:
        """The body, once the peer has sent all it will; refuses a short one."""
        if not self.complete:
            raise WireError(f"{len(self._data)} bytes arrived of the declared size {self.size}")
        return bytes(self._data)
