"""Which browsers' requests an app origin accepts: the Host and Origin rules, and the
host name each app is served under.

* **One site per app**: cookies ignore ports (RFC 6265 section 8.5), so every
  ``127.0.0.1:<port>`` shares one cookie jar with every other app and every other
  localhost service. By default each app is served as ``<label>.localhost:<port>``
  (:class:`UrlForm.NAME`), ``<label>`` a fresh random DNS label per registration:
  browsers resolve ``*.localhost`` to loopback themselves, and a host-only cookie of
  one name reaches no other name. The label is a secret of the same kind as the URL
  (a local user who lists every listening socket still does not know what to send the
  browser to), so no refusal ever names it. :class:`UrlForm.IP` is the accepted
  contract's ``http://127.0.0.1:<port>/``, an opt-in with that shared jar.
* **Host** (DNS rebinding, and the one site per app): a page on ``evil.example``
  whose name re-resolves to 127.0.0.1 still sends ``Host: evil.example:<port>``. Only
  the app's own ``<label>.localhost:<port>`` is served (in the IP form:
  ``127.0.0.1:<port>``, ``localhost:<port>`` and ``[::1]:<port>``); 421 otherwise;
  a missing, repeated or malformed Host is a 400.
* **Origin** (cross-site requests): WebSocket upgrades and unsafe methods are the requests
  a foreign page can make without reading the answer. They are served only when
  ``Origin`` is absent (not a browser) or is one of this session's app origins, so a
  frontend and its API registered as two apps keep working together. ``Origin: null``
  (sandboxed frames, ``file:`` pages) is refused.
"""

from __future__ import annotations

import base64
import enum
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandbridge.exceptions import HttpError
from sandbridge.protocol.http.fields import field_values

if TYPE_CHECKING:  # a type alias only: the parser (and httptools) is the data path's
    from sandbridge.protocol.http.parser import Headers

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
# Browsers resolve every name under it to loopback themselves (RFC 6761 section 6.3).
LOCALHOST_DOMAIN = "localhost"
# 128 bits: as unguessable as a session key; 26 characters of lowercase base32, one
# DNS label (at most 63 characters), case-insensitive like every DNS name.
LABEL_BYTES = 16
SAFE_METHODS = frozenset({b"GET", b"HEAD", b"OPTIONS"})
# host = IP-literal / IPv4address / reg-name, then an optional port (RFC 9110 section 7.2).
_HOST_SYNTAX = re.compile(rb"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~%!$&'()*+,;=]+)(:[0-9]{1,5})?")


class UrlForm(enum.Enum):
    """The URL an app gets: its own host name, or the accepted contract's IP form."""

    NAME = "name"  # http://<label>.localhost:<port>/: one site per app (the default)
    IP = "ip"  # http://127.0.0.1:<port>/: every app and localhost service share cookies


# Said where the IP form is chosen (``--url-form ip``).
IP_FORM_CAVEAT = (
    "--url-form ip: apps are served at http://127.0.0.1:<port>/, and cookies ignore "
    "ports, so every app, every other localhost service and any local user's listener "
    "on 127.0.0.1 share one cookie jar with them"
)


def new_label() -> str:
    """A fresh, unguessable DNS label: 128 random bits in lowercase base32, no padding."""
    return base64.b32encode(secrets.token_bytes(LABEL_BYTES)).decode("ascii").rstrip("=").lower()


_LABEL = re.compile(r"[a-z2-7]{26}")


def is_label(text: str) -> bool:
    """Whether ``text`` is a label :func:`new_label` makes (a recorded one, read back)."""
    return _LABEL.fullmatch(text) is not None


@dataclass(frozen=True, slots=True)
class AppOrigin:
    """The host name one app is served under, and what a browser sends for it."""

    host_port: int
    label: str | None = None  # None: the IP form
    hosts: frozenset[bytes] = field(init=False)  # the Host values served, lower-case
    origins: frozenset[bytes] = field(init=False)  # the Origin values a page of it sends

    def __post_init__(self) -> None:
        names = LOOPBACK_NAMES if self.label is None else (self.hostname,)
        hosts = frozenset(f"{name}:{self.host_port}".encode() for name in names)
        object.__setattr__(self, "hosts", hosts)
        object.__setattr__(self, "origins", frozenset(b"http://" + host for host in hosts))

    @classmethod
    def new(cls, host_port: int, form: UrlForm = UrlForm.NAME) -> AppOrigin:
        """The origin of a new registration: a fresh label in the name form."""
        return cls(host_port, new_label() if form is UrlForm.NAME else None)

    @property
    def hostname(self) -> str:
        """``<label>.localhost``, or ``127.0.0.1`` in the IP form."""
        return "127.0.0.1" if self.label is None else f"{self.label}.{LOCALHOST_DOMAIN}"

    @property
    def origin(self) -> str:
        """``http://<hostname>:<port>``: what URLs and rewritten redirects start with."""
        return f"http://{self.hostname}:{self.host_port}"

    def url(self, base_path: str) -> str:
        """The app's URL: its origin, then the base path (``/`` or ``/app``)."""
        return self.origin + base_path


def origins_of(ports: Iterable[int]) -> frozenset[bytes]:
    """Every origin a browser may use for these app ports in the IP form."""
    return frozenset(origin for port in ports for origin in AppOrigin(port).origins)


def check_host(headers: Headers, own: AppOrigin) -> bytes:
    """Return the one Host value if it names this app's origin, else refuse."""
    return check_host_values(field_values(headers, b"host"), own)


def check_host_values(hosts: list[bytes], own: AppOrigin) -> bytes:
    """:func:`check_host` for the Host values already picked out of the head."""
    if len(hosts) == 1 and hosts[0] in own.hosts:
        return hosts[0]  # the usual case: exactly this app's own name, as browsers send it
    if not hosts:
        raise HttpError(400, "missing Host header")
    if len(hosts) > 1:
        raise HttpError(400, "more than one Host header")
    host = hosts[0]
    if not _HOST_SYNTAX.fullmatch(host):
        raise HttpError(400, f"malformed Host header {host[:100].decode('latin-1')!r}")
    if host.lower() not in own.hosts:
        if own.label is None:
            expected = f"this app's origin 127.0.0.1:{own.host_port}"
        else:
            # Never the label: a DNS-rebinding page can read this answer.
            expected = "this app's host name: open the URL its registration printed"
        raise HttpError(421, f"Host {host[:100].decode('latin-1')!r} is not {expected}")
    return host


def check_origin(
    headers: Headers, method: bytes, upgrade: bool, session_origins: frozenset[bytes]
) -> None:
    """Refuse a cross-site upgrade or unsafe request (403)."""
    check_origin_values(field_values(headers, b"origin"), method, upgrade, session_origins)


def check_origin_values(
    origins: list[bytes], method: bytes, upgrade: bool, session_origins: frozenset[bytes]
) -> None:
    """:func:`check_origin` for the Origin values already picked out of the head."""
    if not upgrade and method in SAFE_METHODS:
        return
    if not origins:
        return
    if len(origins) > 1:
        raise HttpError(400, "more than one Origin header")
    origin = origins[0].lower().rstrip(b"/")
    if origin == b"null":
        raise HttpError(403, "Origin 'null' may not send this request")
    if origin not in session_origins:
        kind = "WebSocket upgrade" if upgrade else f"{method.decode('ascii', 'replace')} request"
        raise HttpError(
            403,
            f"cross-site {kind} from {origins[0][:100].decode('latin-1')!r} refused: "
            "only this session's app origins may send it",
        )
