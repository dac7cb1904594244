"""Private app origins (``sandbridge run --private``): a one-time token, then a cookie.

Loopback ports are reachable by every local user. In a private session each app URL
carries a one-time token (``?sandbridge_token=...``). The first request with it is
answered by the relay itself: a redirect to the same URL without the token and an
HttpOnly cookie named after the app's port. Every later request must carry that cookie;
the relay removes its own cookies before a request reaches the app, so the app never
sees them, and removes every ``Set-Cookie`` of a ``sandbridge_*`` cookie from the app's
responses, so the app can neither overwrite nor expire them.

The cookie is host-only (no ``Domain``): in the default URL form
(:class:`~sandbridge.protocol.http.origin_policy.UrlForm`) it is bound to the app's own
``<label>.localhost`` and no other name, app or local user's listener ever receives it.
In the IP form it is sent to every ``127.0.0.1`` port (cookies ignore ports).
"""

from __future__ import annotations

import hmac
import re
import secrets
import urllib.parse
from dataclasses import dataclass, field

from sandbridge.exceptions import HttpError
from sandbridge.protocol.http.parser import Headers

TOKEN_PARAM = "sandbridge_token"  # noqa: S105 (a parameter name, not a secret)
COOKIE_PREFIX = b"sandbridge_"
# A Set-Cookie whose cookie name is a relay cookie's, however it is spelled: browsers
# trim whitespace around the name and compare nothing case-insensitively, but a
# nameless cookie (``=sandbridge_1=x``) is sent as ``sandbridge_1=x`` all the same.
_RELAY_SET_COOKIE = re.compile(rb"[\s=]*" + COOKIE_PREFIX, re.IGNORECASE)
# 256 bits each: unguessable by anyone who did not get the URL.
SECRET_BYTES = 32


def cookie_name(host_port: int) -> bytes:
    """Cookies ignore ports, so the cookie's name carries the app's port."""
    return COOKIE_PREFIX + str(host_port).encode()


def is_relay_set_cookie(value: bytes) -> bool:
    """Whether a ``Set-Cookie`` value sets (or expires) a ``sandbridge_*`` cookie."""
    return _RELAY_SET_COOKIE.match(value) is not None


def strip_relay_cookies(headers: Headers) -> Headers:
    """Remove every ``sandbridge_*`` cookie (of any app) from the Cookie headers."""
    result: Headers = []
    for name, value in headers:
        if name.lower() != b"cookie":
            result.append((name, value))
            continue
        kept = [
            part
            for part in (piece.strip() for piece in value.split(b";"))
            if part and not _RELAY_SET_COOKIE.match(part)
        ]
        if kept:
            result.append((name, b"; ".join(kept)))
    return result


def _cookie_values(headers: Headers, wanted: bytes) -> list[bytes]:
    """Every value of the cookie named ``wanted``: a page can add same-named cookies
    (another path), so the browser may send several."""
    found: list[bytes] = []
    for name, value in headers:
        if name.lower() == b"cookie":
            for piece in value.split(b";"):
                key, _, setting = piece.strip().partition(b"=")
                if key == wanted:
                    found.append(setting)
    return found


@dataclass(frozen=True, slots=True)
class Redirect:
    """Answer with a redirect to ``location`` that sets ``set_cookie``."""

    location: bytes
    set_cookie: bytes


@dataclass
class AccessGate:
    """The token and cookie of one private app."""

    host_port: int
    token: str = field(default_factory=lambda: secrets.token_urlsafe(SECRET_BYTES))
    secret: bytes = field(default_factory=lambda: secrets.token_urlsafe(SECRET_BYTES).encode())
    token_used: bool = False

    def url_suffix(self) -> str:
        return f"?{TOKEN_PARAM}={self.token}"

    def check(self, target: bytes, headers: Headers) -> Redirect | None:
        """``None``: let the request through (after :func:`strip_relay_cookies`);
        :class:`Redirect`: the token exchange; raises 403 for everyone else."""
        path, _, query = target.partition(b"?")
        pieces = query.split(b"&") if query else []
        # Compared as bytes: ``hmac`` compares no ``str`` with a non-ASCII character
        # (``%C3%A9`` decoded), and that TypeError ended the connection unanswered.
        offered = [
            urllib.parse.unquote_to_bytes(value)
            for key, _, value in (piece.partition(b"=") for piece in pieces)
            if key == TOKEN_PARAM.encode()
        ]
        if offered:
            if self.token_used or not hmac.compare_digest(offered[0], self.token.encode()):
                raise HttpError(
                    403,
                    "this private app's token was already used or is wrong; "
                    "register the app again for a new URL",
                )
            self.token_used = True
            rest = b"&".join(p for p in pieces if p.partition(b"=")[0] != TOKEN_PARAM.encode())
            location = path + (b"?" + rest if rest else b"")
            cookie = (
                cookie_name(self.host_port)
                + b"="
                + self.secret
                + b"; Path=/; HttpOnly; SameSite=Strict"
            )
            return Redirect(location, cookie)
        presented = _cookie_values(headers, cookie_name(self.host_port))
        # Any of them: a cookie the owner did not set cannot lock the owner out.
        if not any([hmac.compare_digest(value, self.secret) for value in presented]):
            raise HttpError(403, "this app is private: open the URL with its one-time token first")
        return None


def redirect_response(redirect: Redirect, keep_alive: bool = True) -> bytes:
    """The relay's own answer to a token exchange; ``keep_alive``: the request's (a
    ``Connection: close`` or HTTP/1.0 one is answered with ``Connection: close``)."""
    return (
        b"HTTP/1.1 303 See Other\r\nLocation: "
        + redirect.location
        + b"\r\nSet-Cookie: "
        + redirect.set_cookie
        + b"\r\nCache-Control: no-store\r\nContent-Length: 0\r\nConnection: "
        + (b"keep-alive" if keep_alive else b"close")
        + b"\r\n\r\n"
    )
