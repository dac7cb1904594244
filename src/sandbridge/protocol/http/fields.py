"""RFC 9110 field syntax: what a header name, value, method and reason may contain."""

from __future__ import annotations

import re

# token = 1*tchar (RFC 9110 section 5.6.2)
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# field-value: visible ASCII, obs-text, and inner spaces/tabs; no CR, LF or NUL.
_FIELD_VALUE = re.compile(rb"[\x21-\x7e\x80-\xff]([\x20-\x7e\x80-\xff\t]*[\x21-\x7e\x80-\xff])?")
# reason-phrase = *( HTAB / SP / VCHAR / obs-text )
_REASON = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")


def is_token(value: bytes) -> bool:
    """True if ``value`` is a valid header name or method."""
    return _TOKEN.fullmatch(value) is not None


def is_field_value(value: bytes) -> bool:
    """True if ``value`` is a valid header value (empty allowed, no surrounding spaces)."""
    return value == b"" or _FIELD_VALUE.fullmatch(value) is not None


def is_reason_phrase(value: bytes) -> bool:
    """True if ``value`` may stand after a status code."""
    return _REASON.fullmatch(value) is not None


def field_values(headers: list[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    """Every value of header ``name`` (lower-case), in order."""
    return [value for key, value in headers if key.lower() == name]
