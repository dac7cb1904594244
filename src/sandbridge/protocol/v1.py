"""Forwarding v1: the accepted design's buffered JSON exchange on ``upstream.sock``.

One JSON line per connection in each direction. Request::

    {"type":"http_request","port":4173,"base_path":"/app","method":"GET",
     "path":"/styles.css?theme=dark","headers":[["accept","text/css"]],"body_base64":null}

Answer ``{"ok":true,"status":200,"reason":"OK","headers":[...],"body_base64":"..."}`` or
``{"ok":false,"error":"..."}``. Bodies travel whole, so sandbridge caps them at
:data:`~sandbridge.protocol.limits.MAX_V1_BODY_BYTES` and uses stream mode between its own
host and shim.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from sandbridge.exceptions import WireError
from sandbridge.protocol.contract import V1_REQUEST_TYPE
from sandbridge.protocol.http.fields import is_field_value, is_reason_phrase, is_token
from sandbridge.protocol.jsonline import decode_object, encode_failure, encode_object, require_type
from sandbridge.protocol.limits import MAX_V1_BODY_BYTES, MAX_V1_LINE_BYTES
from sandbridge.protocol.port import validate_port
from sandbridge.protocol.registration import normalize_base_path

Headers = list[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class V1Request:
    """A decoded and validated ``http_request``."""

    port: int
    base_path: str
    method: str
    path: str
    headers: Headers
    body: bytes


@dataclass(frozen=True, slots=True)
class V1Response:
    """A decoded and validated v1 answer with ``ok: true``."""

    status: int
    reason: str
    headers: Headers
    body: bytes


def _decode_headers(value: object) -> Headers:
    if not isinstance(value, list):
        raise WireError(f"headers must be a list of [name, value] pairs, got {value!r:.80}")
    headers: Headers = []
    for pair in value:
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(isinstance(part, str) for part in pair)
        ):
            raise WireError(
                f"each header must be a [name, value] pair of strings, got {pair!r:.80}"
            )
        try:
            name, field = pair[0].encode("ascii"), pair[1].encode("latin-1")
        except UnicodeEncodeError:
            raise WireError(f"header {pair[0]!r:.80} has characters outside latin-1") from None
        if not is_token(name):
            raise WireError(f"invalid header name {pair[0]!r:.80}")
        if not is_field_value(field):
            raise WireError(f"invalid value for header {pair[0]!r:.80}: {pair[1]!r:.80}")
        headers.append((name, field))
    return headers


def _encode_headers(headers: Headers) -> list[list[str]]:
    return [[name.decode("ascii"), value.decode("latin-1")] for name, value in headers]


def _decode_body(value: object) -> bytes:
    if value is None:
        return b""
    if not isinstance(value, str):
        raise WireError(f"body_base64 must be a string or null, got {type(value).__name__}")
    if len(value) > (MAX_V1_BODY_BYTES * 4) // 3 + 4:
        raise WireError(f"body larger than the v1 limit of {MAX_V1_BODY_BYTES} bytes")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise WireError("body_base64 is not valid base64") from None


def _encode_body(body: bytes) -> str | None:
    return base64.b64encode(body).decode("ascii") if body else None


def encode_request(request: V1Request) -> bytes:
    """Serialise a v1 ``http_request`` line."""
    return encode_object(
        {
            "type": V1_REQUEST_TYPE,
            "port": request.port,
            "base_path": request.base_path,
            "method": request.method,
            "path": request.path,
            "headers": _encode_headers(request.headers),
            "body_base64": _encode_body(request.body),
        }
    )


def decode_request_message(message: dict[str, Any]) -> V1Request:
    """Validate an already-decoded ``http_request`` object."""
    require_type(message, V1_REQUEST_TYPE)
    method = message.get("method")
    if not isinstance(method, str) or not is_token(method.encode("ascii", "replace")):
        raise WireError(f"invalid method {method!r:.80}")
    path = message.get("path")
    if (
        not isinstance(path, str)
        or not path.startswith("/")
        or not path.isascii()
        or any(ch.isspace() or not ch.isprintable() for ch in path)
    ):
        raise WireError(f"path must be an origin-form target starting with '/', got {path!r:.80}")
    return V1Request(
        port=validate_port(message.get("port")),
        base_path=normalize_base_path(message.get("base_path", "/")),
        method=method,
        path=path,
        headers=_decode_headers(message.get("headers", [])),
        body=_decode_body(message.get("body_base64")),
    )


def decode_request(line: bytes) -> V1Request:
    """Decode and validate one v1 request line."""
    return decode_request_message(decode_object(line, MAX_V1_LINE_BYTES))


def encode_response(response: V1Response) -> bytes:
    """Serialise a successful v1 answer."""
    return encode_object(
        {
            "ok": True,
            "status": response.status,
            "reason": response.reason,
            "headers": _encode_headers(response.headers),
            "body_base64": _encode_body(response.body),
        }
    )


def encode_error(message: str) -> bytes:
    """Serialise a v1 failure answer."""
    return encode_failure(message)


def decode_response(line: bytes) -> V1Response:
    """Decode a v1 answer; an ``ok: false`` answer raises :class:`WireError` with its text."""
    message = decode_object(line, MAX_V1_LINE_BYTES)
    ok = message.get("ok")
    if ok is False:
        error = message.get("error")
        raise WireError(f"shim refused the request: {error!s:.200}")
    if ok is not True:
        raise WireError(f"answer must have ok true or false, got {ok!r:.80}")
    status = message.get("status")
    if isinstance(status, bool) or not isinstance(status, int) or not 200 <= status <= 599:
        raise WireError(f"status must be an integer 200..599, got {status!r:.80}")
    reason = message.get("reason", "")
    if not isinstance(reason, str) or not is_reason_phrase(reason.encode("latin-1", "replace")):
        raise WireError(f"invalid reason phrase {reason!r:.80}")
    return V1Response(
        status=status,
        reason=reason,
        headers=_decode_headers(message.get("headers", [])),
        body=_decode_body(message.get("body_base64")),
    )
