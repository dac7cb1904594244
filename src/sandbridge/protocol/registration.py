"""The registration message on ``relay.sock`` (contract kept from the accepted design).

Request: ``{"type":"register","port":4173,"base_path":"/"}``.
Answer: ``{"ok":true,"host_port":43125,"base_path":"/","url":"http://127.0.0.1:43125/"}``
or ``{"ok":false,"error":"..."}``. The same socket also takes sandbridge's own open
request (:mod:`sandbridge.protocol.open_request`) and auto-publish's unregister
(:mod:`sandbridge.protocol.auto_registration`); :func:`parse_request` tells them apart by
:data:`REQUEST_TYPES`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from sandbridge.exceptions import RegistrationError, WireError
from sandbridge.protocol.auto_registration import (
    UnregisterRequest,
    parse_published_by,
    unregister_request,
)
from sandbridge.protocol.jsonline import decode_object, encode_object
from sandbridge.protocol.limits import MAX_BASE_PATH_LENGTH
from sandbridge.protocol.open_request import OpenTarget, parse_open_message, shown
from sandbridge.protocol.port import validate_port
from sandbridge.protocol.sandbox_requests import UNREGISTER

# RFC 3986 path characters: unreserved, sub-delims, ":", "@", "/" and %-escapes.
# Everything else (whitespace, controls, "?", "#", non-ASCII, quotes) is refused.
_PATH_CHARS = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
# Whitespace (str.isspace's, which re's \s is) and C0 controls and DEL: one search, not a
# Python step per character: a far side's APPS list carries up to 1,024 base paths of
# 1 KiB, each list checked on the laptop's event loop as it arrives, at the link's speed.
_SPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class RegisterRequest:
    """A validated registration: forward host traffic to sandbox ``port`` under ``base_path``."""

    port: int
    base_path: str
    # Auto-publish's optional fields (protocol/auto_registration.py).
    process: str | None = None
    auto: bool = False


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
    if _SPACE_OR_CONTROL.search(value):
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


REGISTER = "register"
OPEN = "open"
RelayRequest = RegisterRequest | OpenTarget | UnregisterRequest


def register_request(message: dict[str, Any]) -> RegisterRequest:
    """The request of a decoded ``{"type":"register",...}`` message."""
    if "port" not in message:
        raise RegistrationError("port is missing: send an integer 1..65535")
    port = validate_port(message["port"])
    base_path = normalize_base_path(message.get("base_path", "/"))
    published_by = parse_published_by(message)
    return RegisterRequest(port, base_path, published_by.process, published_by.auto)


# Every request type relay.sock knows, in the order a refusal names them; a server
# accepts these or some of them (``accepted``), and a refusal lists what it accepts.
REQUEST_TYPES: dict[str, Callable[[dict[str, Any]], RelayRequest]] = {
    REGISTER: register_request,
    OPEN: parse_open_message,
    UNREGISTER: unregister_request,
}


def unknown_type(kind: object, accepted: Collection[str]) -> RegistrationError:
    """The refusal of a ``type`` not in ``accepted``, naming each accepted one."""
    names = [f"'{name}'" for name in REQUEST_TYPES if name in accepted]
    listed = " or ".join(names) if len(names) <= 2 else f"{', '.join(names[:-1])} or {names[-1]}"
    return RegistrationError(f"type must be {listed}, got {shown(kind)}")


def parse_request(line: bytes, accepted: Collection[str] = tuple(REQUEST_TYPES)) -> RelayRequest:
    """Decode one request line on ``relay.sock`` whose type is one of ``accepted``."""
    message = _decode(line)
    kind = message.get("type")
    if not isinstance(kind, str) or kind not in accepted or kind not in REQUEST_TYPES:
        raise unknown_type(kind, accepted)
    return REQUEST_TYPES[kind](message)


def parse_register_request(line: bytes) -> RegisterRequest:
    """Decode and validate one registration request line."""
    request = parse_request(line, (REGISTER,))
    assert isinstance(request, RegisterRequest)
    return request


# The request a client sends (encode_register_request) is protocol/sandbox_requests.py's.


def app_url(host_port: int, base_path: str) -> str:
    """The URL a registration answers with: ``http://127.0.0.1:<port>/`` or ``.../app``."""
    return f"http://127.0.0.1:{host_port}{base_path}"


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
