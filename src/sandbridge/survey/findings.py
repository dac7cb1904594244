"""What a survey finds in one project file, and how a host is taken out of a URL (pure).

A finding carries a *name* (an ecosystem, a host, a port, a variable's name) and where it
was seen, never a value. Whatever a finding holds came from the project, which an earlier
sandbox may have written (a file named ``x\nevil.test\n``, a compose service named with a
terminal escape): every text field is stored :func:`~sandbridge.shown_text.shown`,
one printable line, so no output or policy comment built from it can start a second line
or move the owner's cursor. The readers in :mod:`sandbridge.survey.packages` and
:mod:`sandbridge.survey.services` build findings only through the functions here,
which keep the host of a URL and drop its user, password, path and query, so a token
written into a URL (``https://user:token@host/x``) cannot reach any output.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from sandbridge.egress.decision import address_kind
from sandbridge.project.policy import DEFAULT_GATE_ADDR, normalise_name, parse_ip
from sandbridge.shown_text import shown

# Loopback names: a registry or service there is a host service, not an internet host.
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})
# What a sandbox names this host by: the gate (word or default address) is a host service.
GATE_HOSTS = frozenset({"gate", str(DEFAULT_GATE_ADDR)})
# A URL as it appears in a line of a manifest, lockfile or CI file.
# A bracketed IPv6 host (``https://[2001:db8::1]:8443/``) is part of it; other brackets
# end it (``[https://x]`` in a flow list). Every repetition that can fail is bounded or
# unambiguous: a megabyte line of ``a+a+a+...`` must not take quadratic time.
URL = re.compile(
    r"\b(?:[a-z][a-z0-9.-]{0,15}\+)?(?:https?|git|ssh|sftp)://"
    r"(?:[^\s\"'<>`()\[\]{},;\\@/]*@)?(?:\[[0-9A-Fa-f:.]+\])?[^\s\"'<>`()\[\]{},;\\]*"
)
# scp-like git remotes: ``git@host:org/repo.git`` (no scheme).
SCP_REMOTE = re.compile(r"^(?:[A-Za-z0-9._-]+@)?(?P<host>[A-Za-z0-9.-]+):(?!//)(?P<path>\S*)$")
SCHEME_PORTS = {"http": 80, "https": 443}


class Kind(enum.Enum):
    """What a finding names."""

    ECOSYSTEM = "ecosystem"  # a toolchain the project uses (python, npm, cargo...)
    HOST = "host"  # an internet host the project's tools reach
    SERVICE = "service"  # a port of the host the project's tools reach (compose, localhost)
    PORT = "port"  # a port the project serves itself (devcontainer, Procfile)
    VARIABLE = "variable"  # an environment variable's name that needs a value
    IMAGE = "image"  # a container image a compose file names (its name only)


@dataclass(frozen=True, slots=True)
class Finding:
    """One name a project declares: ``name`` of ``kind``, seen at ``where`` as ``what``."""

    kind: Kind
    name: str  # an ecosystem, a host name or address, a port number, a variable's name
    where: str  # ``file`` or ``file:line``, relative to the surveyed directory
    what: str  # how the file uses it: "package index (--index-url)", "git remote origin"
    ecosystem: str = ""  # the toolchain the host or variable belongs to, if any
    port: int | None = None  # a host's port when the URL names one

    def __post_init__(self) -> None:
        for name in ("name", "where", "what", "ecosystem"):
            object.__setattr__(self, name, shown(getattr(self, name)))

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "kind": self.kind.value,
            "name": self.name,
            "where": self.where,
            "what": self.what,
        }
        if self.ecosystem:
            data["ecosystem"] = self.ecosystem
        if self.port is not None:
            data["port"] = self.port
        return data


Reader = Callable[[str, str], list[Finding]]
"""A reader of one kind of file: (path relative to the surveyed dir, text) -> findings."""


def valid_host(text: str) -> str | None:
    """``text`` as a normalised host name or IP literal, or ``None`` if it is neither."""
    ip = parse_ip(text)
    if ip is not None:
        return str(ip)
    return normalise_name(text)


def url_host(text: str) -> tuple[str, int | None] | None:
    """The host and explicit port of a URL (credentials, path and query dropped).

    Accepts ``scheme://[user[:pass]@]host[:port]/...``, ``registry+https://...``,
    ``git+ssh://...`` and scp-like ``user@host:path``; ``None`` for anything else,
    including a host that is not a valid name (``${{ secrets.HOST }}``).
    """
    text = text.strip().strip("\"'")
    if "://" in text:
        try:
            parts = urlsplit(text)
            host, port = parts.hostname, parts.port
        except ValueError:
            return None
        if host is None or _cut_credentials(parts.netloc, text.split("://", 1)[1]):
            return None
        if port == 0:  # no port anything listens on: not a URL a tool reaches
            return None
        valid = valid_host(host)
        return None if valid is None else (valid, port)
    match = SCP_REMOTE.match(text)
    if match and "." in match.group("host"):
        valid = valid_host(match.group("host"))
        return None if valid is None else (valid, None)
    return None


def _cut_credentials(netloc: str, rest: str) -> bool:
    """Whether the URL's authority ended inside its credentials: a password holding ``/``,
    ``?`` or ``#`` (``https://user:12345/x@host``) leaves ``user:12345`` as host and port,
    a secret's first digits as the "port". Then an ``@`` follows in the first segment (or
    the query or fragment) after the port: such a URL gives no host."""
    if "@" in netloc or ":" not in netloc.lstrip("[").split("]")[-1]:
        return False
    after = rest[len(netloc) :]
    first = re.split(r"(?<=.)/", after, maxsplit=1)[0]
    return re.search(r"[^/]@", first) is not None  # /@scope/pkg is a path


def is_this_host(host: str) -> bool:
    """Whether a URL's (valid) host names this host: a loopback name or address in any
    spelling (``127.0.0.2``, ``[::ffff:127.0.0.1]``, ``0.0.0.0``), or the gate."""
    if host in LOOPBACK_HOSTS or host in GATE_HOSTS:
        return True
    ip = parse_ip(host)
    return ip is not None and address_kind(ip) in ("loopback", "unspecified")


def not_public(host: str) -> str | None:
    """What an IP-literal host is when it is not a public address (``"private"``,
    ``"link-local"``...), else ``None`` (names included: the proxy judges what they
    resolve to)."""
    ip = parse_ip(host)
    return None if ip is None else address_kind(ip)


def host_display(host: str, port: int | None) -> str:
    """``host`` or ``host:port`` (``[v6]:port``) as a survey prints it."""
    shown = f"[{host}]" if ":" in host else host
    return shown if port is None else f"{shown}:{port}"


def urls_in(line: str) -> list[tuple[str, int | None]]:
    """Every URL host in ``line``, in order, without credentials."""
    found = []
    for match in URL.finditer(line):
        parsed = url_host(match.group(0))
        if parsed is not None:
            found.append(parsed)
    return found


def host_finding(
    url: str, where: str, what: str, ecosystem: str = "", default_port: int | None = None
) -> Finding | None:
    """A :class:`Finding` for the host of ``url``: a host service when it is loopback."""
    parsed = url_host(url)
    if parsed is None:
        return None
    host, port = parsed
    if is_this_host(host):
        scheme = url.strip().strip("\"'").partition("://")[0].rsplit("+", 1)[-1].lower()
        service_port = port or default_port or SCHEME_PORTS.get(scheme)
        if service_port is None:
            return None
        return Finding(
            Kind.SERVICE, str(service_port), where, f"{what} on this host", ecosystem, service_port
        )
    return Finding(Kind.HOST, host, where, what, ecosystem, port)
