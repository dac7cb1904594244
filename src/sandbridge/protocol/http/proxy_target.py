"""Where a proxy request wants to go: the CONNECT target, the absolute URL, the Host header.

Sans-I/O: bytes in, ``(host, port)`` out, or an :class:`~sandbridge.exceptions.HttpError`
with the status the client gets (always 400: the request is malformed, not refused).
Whether the destination is allowed is the policy's question, not this module's.
"""

from __future__ import annotations

from sandbridge.exceptions import AuthorityError, HttpError
from sandbridge.protocol.authority import split_host_port
from sandbridge.protocol.http.forwarding import error_response


def split_authority(authority: bytes, default_port: int | None) -> tuple[str, int]:
    """``host[:port]`` (``[v6]:port`` included) from a CONNECT target or a Host header."""
    try:
        text = authority.decode("ascii")
    except UnicodeDecodeError:
        raise HttpError(400, f"host {authority[:100]!r} is not ASCII") from None
    try:
        host, port = split_host_port(text)
    except AuthorityError as exc:
        what = "port" if exc.port_text is not None else "host"
        raise HttpError(400, f"bad {what} in {text[:100]!r}") from None
    if not host or any(c in host for c in "/@?# "):
        raise HttpError(400, f"bad host {text[:100]!r}")
    if port is not None:
        return host, port
    if default_port is None:
        raise HttpError(400, f"CONNECT target {text[:100]!r} needs a port")
    return host, default_port


def split_absolute_url(target: bytes) -> tuple[str, int, bytes]:
    """``http://host[:port]/path?q`` into host, port and the origin-form target."""
    lowered = target[:8].lower()
    if lowered.startswith(b"https://"):
        raise HttpError(400, "send https:// requests through CONNECT (HTTPS_PROXY)")
    if not lowered.startswith(b"http://"):
        raise HttpError(400, f"a proxy request needs an absolute http:// URL, got {target[:100]!r}")
    rest = target[7:]
    cut = min((i for i in (rest.find(b"/"), rest.find(b"?")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:]
    if b"@" in authority:
        raise HttpError(400, "user information in a proxy URL is refused")
    host, port = split_authority(authority, 80)
    if not path.startswith(b"/"):
        path = b"/" + path
    return host, port, path


def same_authority(a: tuple[str, int], b: tuple[str, int]) -> bool:
    """True if two (host, port) pairs name the same destination (case, trailing dot)."""
    return (a[0].lower().removesuffix("."), a[1]) == (b[0].lower().removesuffix("."), b[1])


# Room for a destination and the line that would allow it; a status line stays short.
MAX_REASON_CHARS = 300


def proxy_refusal(status: int, text: str) -> bytes:
    """The proxy's refusal: the usual plain-text error, with ``text`` as the reason phrase
    too, since clients that hide a refused CONNECT's body (Python's http.client, so pip
    and requests) still show the status line's reason."""
    response = error_response(status, text)
    _, rest = response.split(b"\r\n", 1)
    phrase = "".join(c if " " <= c <= "~" else "?" for c in text[:MAX_REASON_CHARS])
    return b"HTTP/1.1 %d " % status + phrase.encode("ascii") + b"\r\n" + rest
