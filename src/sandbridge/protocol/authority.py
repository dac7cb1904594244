"""``host[:port]``: the one parser of every authority sandbridge reads.

A CONNECT target, a proxy request's Host header or absolute URL, and an entry of the
egress policy all name a destination the same way: a DNS name or IPv4 address, or an
IPv6 address in brackets, then optionally ``:`` and a port 1..65535 in at most five
ASCII digits. Callers add their own context to a refusal (the file and line, or the
HTTP status).
"""

from __future__ import annotations

from sandbridge.exceptions import AuthorityError

MAX_PORT_DIGITS = 5


def parse_port(text: str) -> int:
    """A port 1..65535 written in ASCII digits, or :class:`AuthorityError`."""
    digits = len(text) <= MAX_PORT_DIGITS and text.isascii() and text.isdigit()
    if not digits or not 1 <= int(text) <= 65535:
        raise AuthorityError(f"port must be 1..65535, got {text[:20]!r}", text)
    return int(text)


def split_host_port(text: str) -> tuple[str, int | None]:
    """``(host, port)`` from ``host``, ``host:port``, ``[v6]`` or ``[v6]:port``; an IPv6
    host keeps its brackets. Only the form is checked: whether the host is a valid name
    or address is the caller's question."""
    if text.startswith("["):
        inner, bracket, rest = text[1:].partition("]")
        if not bracket:
            raise AuthorityError(f"unclosed '[' in {text[:100]!r}")
        if rest and not rest.startswith(":"):
            raise AuthorityError(f"expected ':PORT' after ']' in {text[:100]!r}")
        return f"[{inner}]", parse_port(rest[1:]) if rest else None
    host, colon, port = text.rpartition(":")
    if not colon:
        return text, None
    if ":" in host:
        raise AuthorityError(f"write an IPv6 address in brackets, like [::1]:443: {text[:100]!r}")
    return host, parse_port(port)
