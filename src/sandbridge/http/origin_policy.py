"""Which browsers' requests an app origin accepts: the Host and Origin rules.

* **Host** (DNS rebinding): a page on ``evil.example`` whose name re-resolves to 127.0.0.1
  still sends ``Host: evil.example:<port>``. Only ``127.0.0.1:<port>``,
  ``localhost:<port>`` and ``[::1]:<port>`` of this app are served (421 otherwise);
  a missing, repeated or malformed Host is a 400.
* **Origin** (cross-site requests): WebSocket upgrades and unsafe methods are the requests
  a foreign page can make without reading the answer. They are served only when
  ``Origin`` is absent (not a browser) or is one of this session's app origins, so a
  frontend and its API registered as two apps keep working together. ``Origin: null``
  (sandboxed frames, ``file:`` pages) is refused.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from sandbridge.exceptions import HttpError
from sandbridge.http.fields import field_values
from sandbridge.http.parser import Headers

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
SAFE_METHODS = frozenset({b"GET", b"HEAD", b"OPTIONS"})
# host = IP-literal / IPv4address / reg-name, then an optional port (RFC 9110 section 7.2).
_HOST_SYNTAX = re.compile(rb"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~%!$&'()*+,;=]+)(:[0-9]{1,5})?")


def origins_of(ports: Iterable[int]) -> frozenset[bytes]:
    """Every origin a browser may use for these app ports."""
    return frozenset(f"http://{name}:{port}".encode() for port in ports for name in LOOPBACK_NAMES)


def check_host(headers: Headers, host_port: int) -> bytes:
    """Return the one Host value if it names this app's origin, else refuse."""
    return check_host_values(field_values(headers, b"host"), host_port)


@functools.lru_cache(maxsize=1024)
def _own_hosts(host_port: int) -> frozenset[bytes]:
    return frozenset(f"{name}:{host_port}".encode() for name in LOOPBACK_NAMES)


def check_host_values(hosts: list[bytes], host_port: int) -> bytes:
    """:func:`check_host` for the Host values already picked out of the head."""
    if len(hosts) == 1 and hosts[0] in _own_hosts(host_port):
        return hosts[0]  # the usual case: exactly one of this app's own names
    if not hosts:
        raise HttpError(400, "missing Host header")
    if len(hosts) > 1:
        raise HttpError(400, "more than one Host header")
    host = hosts[0]
    if not _HOST_SYNTAX.fullmatch(host):
        raise HttpError(400, f"malformed Host header {host[:100].decode('latin-1')!r}")
    if host.lower() not in _own_hosts(host_port):
        raise HttpError(
            421, f"Host {host.decode('latin-1')!r} is not this app's origin 127.0.0.1:{host_port}"
        )
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
