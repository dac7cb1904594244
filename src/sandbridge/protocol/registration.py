"""The registration message on ``relay.sock`` (contract kept from the accepted design).

Request: ``{"type":"register","port":4173,"base_path":"/"}``.
Answer: ``{"ok":true,"host_port":43125,"base_path":"/","url":"http://127.0.0.1:43125/"}``
or ``{"ok":false,"error":"..."}``. The same socket also takes sandbridge's own open
request (:mod:`sandbridge.protocol.open_request`); :func:`parse_request` tells them apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sandbridge.exceptions import RegistrationError, WireError
from sandbridge.protocol.auto_registration import parse_published_by
from sandbridge.protocol.jsonline import decode_object, encode_object
from sandbridge.protocol.limits import MAX_BASE_PATH_LENGTH
from sandbridge.protocol.open_request import OpenTarget, parse_open_message, shown

# RFC 3986 path characters: unreserved, sub-delims, ":", "@", "/" and %-escapes.
# Everything else (whitespace, controls, "?", "#", non-ASCII, quotes) is refused.
_PATH_CHARS = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


@dataclass(frozen=True, slots=True)
class RegisterRequest:
    """A validated registration: forward host traffic to sandbox ``port`` under ``base_path``."""

    port: int
    base_path: str
    # Auto-publish's optional fields (protocol/auto_registration.py).
    process: str | None = None
    auto: bool = False


def validate_port(value: object) -> int:
    """Return ``value`` if it is an integer TCP port 1..65535."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise RegistrationError(f"port must be an integer 1..65535, got {value!r}")
    if not 1 <= value <= 65535:
        raise RegistrationError(f"port must be an integer 1..65535, got {value!r}")
    return value


def normalize_base_path(value: object) -> str:
    """Validate a base path and return it without a trailing slash (``/`` stays ``/``)."""
    if not isinstance(value, str):
        raise RegistrationError(f"base_path must be a string starting with '/', got {value!r}")
    if len(value) > MAX_BASE_PATH_LENGTH:
        raise RegistrationError(
            f"base_path is {len(value)} characters; the limit is {MAX_BASE_PATH_LENGTH}"
        )
    if not value.startswith("/"):
        raise RegistrationError(f"base_path must start with '/', got {value!r}")
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise RegistrationError(
            f"base_path must not contain whitespace or control characters, got {value!r}"
        )
    if "?" in value or "#" in value:
        raise RegistrationError(f"base_path must not contain '?' or '#', got {value!r}")
    if not _PATH_CHARS.fullmatch(value) or _BAD_ESCAPE.search(value):
        raise RegistrationError(f"base_path has characters not allowed in a URL path: {value!r}")
    stripped = value.rstrip("/") or "/"
    segments = stripped.split("/")[1:]
    if stripped != "/" and any(segment in ("", ".", "..") for segment in segments):
        raise RegistrationError(
            f"base_path must not contain empty, '.' or '..' segments, got {value!r}"
        )
    return stripped


def _decode(line: bytes) -> dict[str, Any]:
    try:
        return decode_object(line)
    except WireError as exc:
        raise RegistrationError(str(exc)) from None


def parse_request(line: bytes) -> RegisterRequest | OpenTarget:
    """Decode one request line on ``relay.sock``: a registration or an open request."""
    message = _decode(line)
    kind = message.get("type")
    if kind == "open":
        return parse_open_message(message)
    if kind != "register":
        raise RegistrationError(f"type must be 'register' or 'open', got {shown(kind)}")
    return _register_request(message)


def parse_register_request(line: bytes) -> RegisterRequest:
    """Decode and validate one registration request line."""
    message = _decode(line)
    kind = message.get("type")
    if kind != "register":
        raise RegistrationError(f"type must be 'register', got {kind!r}")
    return _register_request(message)


def _register_request(message: dict[str, Any]) -> RegisterRequest:
    if "port" not in message:
        raise RegistrationError("port is missing: send an integer 1..65535")
    port = validate_port(message["port"])
    base_path = normalize_base_path(message.get("base_path", "/"))
    published_by = parse_published_by(message)
    return RegisterRequest(port, base_path, published_by.process, published_by.auto)


def app_url(host_port: int, base_path: str) -> str:
    """The URL a registration answers with: ``http://127.0.0.1:<port>/`` or ``.../app``."""
    return f"http://127.0.0.1:{host_port}{base_path}"


def encode_register_request(port: int, base_path: str = "/") -> bytes:
    """The request line ``ags-webview-url`` sends."""
    return encode_object({"type": "register", "port": port, "base_path": base_path})


def encode_register_ok(host_port: int, base_path: str, url: str | None = None) -> bytes:
    """The success answer, field names exactly as the contract has them.

    ``url`` defaults to :func:`app_url`; a private app's URL also carries its token.
    """
    body: dict[str, Any] = {
        "ok": True,
        "host_port": host_port,
        "base_path": base_path,
        "url": app_url(host_port, base_path) if url is None else url,
    }
    return encode_object(body)


def encode_register_error(message: str) -> bytes:
    """The refusal answer: ``{"ok":false,"error":"..."}``."""
    return encode_object({"ok": False, "error": message})
