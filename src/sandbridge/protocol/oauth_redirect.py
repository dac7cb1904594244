"""The loopback ``redirect_uri`` of an OAuth authorize URL (sans-I/O; docs/open.md,
"Logins (OAuth callbacks)").

A login run inside the sandbox (``gh auth login --web``, ``gcloud auth login``, an MCP
server's OAuth) listens on a loopback port inside and opens an authorize URL whose
``redirect_uri`` names that port: ``https://auth.example/authorize?...&redirect_uri=
http%3A%2F%2F127.0.0.1%3A38119%2Fcallback``. The owner's browser is sent there after the
login, on the owner's own loopback. :func:`loopback_redirect` finds that one
``redirect_uri``, strictly (RFC 8252 §7.3: ``http``, a loopback host, a port, a path):
anything looser is no redirect to carry, and the URL is opened as any external URL.
:func:`host_allowed` matches an authorize host against the owner's
``open_external_allow`` names.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from sandbridge.exceptions import RegistrationError
from sandbridge.protocol.open_request import shown

# The redirect hosts a login names, and the host addresses its callback is awaited on:
# ``localhost`` is both loopback addresses, as a browser tries both.
REDIRECT_HOSTS = {
    "localhost": ("127.0.0.1", "::1"),
    "127.0.0.1": ("127.0.0.1",),
    "[::1]": ("::1",),
}
# Below 1024 a port is privileged on the host (and no login's listener uses one): a
# redirect to one would make sandbridge ask for a port it should never hold.
MIN_CALLBACK_PORT = 1024
MAX_PORT = 65535
REDIRECT_PARAM = "redirect_uri"


@dataclass(frozen=True, slots=True)
class LoopbackRedirect:
    """A login's callback address: ``host`` as written (``localhost``, ``127.0.0.1``,
    ``[::1]``), ``port``, and ``path`` (the exact path the callback must request)."""

    host: str
    port: int
    path: str

    @property
    def addresses(self) -> tuple[str, ...]:
        """The host's loopback addresses the callback is awaited on."""
        return REDIRECT_HOSTS[self.host]

    @property
    def authorities(self) -> frozenset[bytes]:
        """The ``Host`` values a browser sends to this address (``localhost:PORT`` for
        ``localhost``; an address names itself)."""
        return frozenset({f"{self.host}:{self.port}".encode()})


def _query_of(url: str) -> str:
    before_fragment = url.split("#", 1)[0]
    return before_fragment.partition("?")[2]


def loopback_redirect(url: str) -> LoopbackRedirect | None:
    """The loopback callback an external ``url`` names in its ``redirect_uri`` query
    parameter, or ``None`` when it names none (no such parameter, or one that is not a
    loopback ``http`` URL: a login redirecting elsewhere needs nothing of the host).
    A ``redirect_uri`` that names a loopback but loosely (two of them, a user name, a
    fragment, a port out of range, an encoded host) is refused, naming the URL: the
    host would not know which one to await, or would await one a browser does not reach.
    """
    values = [
        value
        for name, value in urllib.parse.parse_qsl(_query_of(url), keep_blank_values=True)
        if name == REDIRECT_PARAM
    ]
    if not values:
        return None
    if len(values) > 1:
        raise RegistrationError(f"url names {REDIRECT_PARAM} {len(values)} times: {shown(url)}")
    return parse_redirect(values[0], url)


def _loopback_spelling(authority: str) -> bool:
    """Whether ``authority`` (user and port included) looks meant as a loopback, or
    is an IP literal: a loose form is then refused rather than taken for an external
    redirect the host has nothing to do with."""
    name = authority.lower()
    return any(mark in name for mark in ("localhost", "127.", "[", "%", "0x7f"))


def parse_redirect(redirect: str, url: str) -> LoopbackRedirect | None:
    """``redirect`` (a decoded ``redirect_uri`` of ``url``) as a loopback callback, or
    ``None`` when it is not a loopback URL at all."""
    scheme, sep, after = redirect.partition("://")
    end = min((i for i in (after.find(c) for c in "/?#") if i >= 0), default=len(after))
    authority, rest = after[:end], after[end:]
    # The port follows the last ":" unless that one is inside "[v6]".
    colon = authority.rfind(":") if not authority.endswith("]") else -1
    host, port_text = (authority, "") if colon < 0 else (authority[:colon], authority[colon + 1 :])
    if not sep or not _loopback_spelling(authority):
        return None
    if any(not 0x21 <= ord(ch) <= 0x7E for ch in redirect) or "\\" in redirect:
        raise RegistrationError(
            f"{REDIRECT_PARAM} must be printable ASCII without '\\': {shown(redirect)}"
        )
    if scheme != "http":
        raise RegistrationError(
            f"{REDIRECT_PARAM} to the loopback must be http://, got {shown(redirect)}"
        )
    if "@" in authority:
        raise RegistrationError(f"{REDIRECT_PARAM} carries a user name: {shown(redirect)}")
    if host not in REDIRECT_HOSTS:
        raise RegistrationError(
            f"{REDIRECT_PARAM} host must be localhost, 127.0.0.1 or [::1], got {shown(redirect)}"
        )
    if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5):
        raise RegistrationError(f"{REDIRECT_PARAM} needs a port: {shown(redirect)}")
    port = int(port_text)
    if not MIN_CALLBACK_PORT <= port <= MAX_PORT:
        raise RegistrationError(
            f"{REDIRECT_PARAM} port must be {MIN_CALLBACK_PORT}..{MAX_PORT}, got {shown(redirect)}"
        )
    if "#" in rest:
        raise RegistrationError(f"{REDIRECT_PARAM} carries a fragment: {shown(redirect)}")
    path = rest.partition("?")[0] or "/"
    if not path.startswith("/"):
        raise RegistrationError(f"{REDIRECT_PARAM} has no path: {shown(redirect)}")
    return LoopbackRedirect(host, port, path)


def host_of(url: str) -> str:
    """The lower-case host of an http(s) ``url`` already accepted by
    :func:`~sandbridge.protocol.open_request.classify_url` (no port, no user)."""
    after = url.partition("://")[2]
    end = min((i for i in (after.find(c) for c in "/?#") if i >= 0), default=len(after))
    hostport = after[:end].rpartition("@")[2]
    if hostport.startswith("["):
        return hostport.partition("]")[0].lower() + "]"
    return hostport.partition(":")[0].lower().removesuffix(".")


def host_allowed(patterns: tuple[str, ...], host: str) -> str | None:
    """The first of the owner's ``open_external_allow`` ``patterns`` (an exact name, or
    ``*.domain`` for its subdomains, not the domain itself) that ``host`` matches."""
    for pattern in patterns:
        if pattern.startswith("*.") and host.endswith(pattern[1:]):
            return pattern
        if host == pattern:
            return pattern
    return None
