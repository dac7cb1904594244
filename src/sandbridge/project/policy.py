"""The sandbox's network policy: parse it, merge it, decide destinations (sans-I/O).

A policy comes from the project directory (``.sandbridge/allow``, ``.sandbridge/config``)
and from command-line flags, which add to it. Every entry and setting remembers where it
came from (``file:line``, a flag, or the default) so ``--print-policy`` and every refusal
can name it. Nothing here touches the network: the host's egress gate asks
:mod:`sandbridge.egress.decision` (which decides from a :class:`Policy`) and does the
I/O itself.

Entry syntax, one per line of ``allow`` (or ``allow = ...`` in ``config``, or
``--allow ...``)::

    GATE:PORT            a host service: GATE:PORT inside reaches the host's 127.0.0.1:PORT
                         (GATE is the gate address, or the word ``gate``)
    NAME[:PORT]          a domain through the egress proxy (exact name)
    *.NAME[:PORT]        every subdomain of NAME (not NAME itself)
    IP[:PORT]            an IP-literal destination through the proxy ([IPv6] in brackets)
    ... private          the name may resolve to a loopback, private or link-local address

Without ``:PORT`` a proxy entry allows ports 80, 443 and 8443.
"""

from __future__ import annotations

import enum
import ipaddress
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sandbridge.exceptions import AuthorityError, PolicyError
from sandbridge.project.files import read_project_file
from sandbridge.project.owner_config import refuse_in_project

# Re-exported: their home before the owner's config needed them too.
from sandbridge.project.setting import DEFAULT as DEFAULT  # noqa: PLC0414
from sandbridge.project.setting import Setting as Setting  # noqa: PLC0414
from sandbridge.protocol.authority import split_host_port
from sandbridge.protocol.contract import PROXY_PORT
from sandbridge.protocol.http.origin_policy import UrlForm
from sandbridge.protocol.open_request import OpenAction
from sandbridge.protocol.publish_rules import PublishRule, parse_rule, publishes_any

ALLOW_FILE = Path(".sandbridge") / "allow"
CONFIG_FILE = Path(".sandbridge") / "config"
# The secrets file (project/secrets_file.py): values set inside, never shown.
SECRETS_FILE = Path(".sandbridge") / "env"

# 100.64.0.0/10 is carrier-grade NAT space: never a real destination of a dev machine's
# sandbox, and not loopback (which tools treat specially and NO_PROXY usually covers).
DEFAULT_GATE_ADDR = ipaddress.IPv4Address("100.64.0.1")
# HTTP, HTTPS and the common alternative HTTPS port; anything else must be named.
DEFAULT_PORTS = frozenset({80, 443, 8443})
# A policy file is a reviewed list; one far larger than this was not written by hand.
MAX_POLICY_FILE_BYTES = 256 * 1024
# DNS limits (RFC 1035): 63 bytes per label, 253 characters per name.
MAX_LABEL_LENGTH = 63
MAX_NAME_LENGTH = 253

_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?")
# A variable name (policy env = lines, the secrets file, what the survey reads).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")


class NetMode(enum.Enum):
    """How much network the sandbox gets."""

    NONE = "none"
    ALLOW = "allow"
    FULL = "full"


DEFAULT_MODE: Setting[NetMode] = Setting(NetMode.ALLOW, DEFAULT)
DEFAULT_GATE: Setting[ipaddress.IPv4Address] = Setting(DEFAULT_GATE_ADDR, DEFAULT)
SYSTEM_RESOLVER: Setting[tuple[str, int] | None] = Setting(None, DEFAULT)


@dataclass(frozen=True, slots=True)
class Rule:
    """One proxy destination entry."""

    host: str  # lower-case name, "*.suffix", or a compressed IP literal
    port: int | None  # None: the default ports
    private: bool
    source: str

    @property
    def text(self) -> str:
        """The entry as a line of ``.sandbridge/allow`` would write it."""
        return format_entry(self.host, self.port, self.private)

    def matches(self, host: str, port: int) -> bool:
        """True if ``host`` (normalised) and ``port`` fall under this entry."""
        if self.port is None and port not in DEFAULT_PORTS:
            return False
        if self.port is not None and port != self.port:
            return False
        return host_matches(self.host, host)


@dataclass(frozen=True, slots=True)
class HostService:
    """A host port the sandbox reaches at the gate address."""

    port: int
    source: str


@dataclass(frozen=True, slots=True)
class EnvSetting:
    """A variable set inside the sandbox from ``env = NAME=VALUE`` (value never printed)."""

    name: str
    value: str
    source: str


@dataclass(frozen=True)
class Policy:
    """The effective network policy of one session."""

    mode: Setting[NetMode] = DEFAULT_MODE
    gate_addr: Setting[ipaddress.IPv4Address] = DEFAULT_GATE
    resolver: Setting[tuple[str, int] | None] = SYSTEM_RESOLVER
    rules: tuple[Rule, ...] = ()
    host_services: tuple[HostService, ...] = ()
    env: tuple[EnvSetting, ...] = ()
    # ``protect = PATH``: project paths kept read-only inside, on top of the built-in list
    # (sandbox/protected_paths.py); each resolved under the project root, with its line.
    protect: tuple[Setting[Path], ...] = ()
    # ``open = browser|print|ask``: how the sandbox's open requests are carried out
    # (docs/open.md); ``None``: ``--open`` or the default decides.
    open_action: Setting[OpenAction] | None = None
    # ``url_form = name|ip``: the app URLs' form (docs/contract.md); ``None``:
    # ``--url-form`` or the default (name) decides.
    url_form: Setting[UrlForm] | None = None
    # The policy files that were read, for the one line ``sandbridge run`` prints.
    files_read: tuple[Path, ...] = ()
    # ``publish = auto|PORT|LOW-HIGH [ACTION]``: the ports auto-publish registers
    # (protocol/publish_rules.py), in order; none: auto-publish is off.
    publish: tuple[PublishRule, ...] = ()
    # The project root whose ``.sandbridge/`` was read (``egress approve --save`` appends
    # to its allow file); ``None`` for a policy built without one.
    project: Path | None = None

    @property
    def gate(self) -> str:
        return str(self.gate_addr.value)

    @property
    def proxy_url(self) -> str:
        return f"http://{self.gate}:{PROXY_PORT}"

    def gate_ports(self) -> list[int]:
        """The ports the in-sandbox gate listener opens: the proxy and each host service."""
        return sorted({PROXY_PORT, *(service.port for service in self.host_services)})

    def sandbox_env(self) -> dict[str, str]:
        """Variables the sandbox gets from the policy: proxy settings (allow mode) and ``env``."""
        env: dict[str, str] = {}
        if self.mode.value is NetMode.ALLOW:
            # curl reads only the lower-case http_proxy; other tools read either case.
            no_proxy = f"localhost,127.0.0.1,::1,{self.gate}"
            for name in ("http_proxy", "https_proxy", "all_proxy"):
                env[name] = env[name.upper()] = self.proxy_url
            env["no_proxy"] = env["NO_PROXY"] = no_proxy
        env.update({setting.name: setting.value for setting in self.env})
        return env


def host_matches(pattern: str, host: str) -> bool:
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


# --- parsing --------------------------------------------------------------------------


def _split_host_port(text: str, where: str) -> tuple[str, int | None]:
    try:
        return split_host_port(text)
    except AuthorityError as exc:
        raise PolicyError(f"{where}: {exc}") from None


def parse_ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address ``host`` spells (``[::1]`` included), or ``None`` if it is a name."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def normalise_name(name: str) -> str | None:
    """A DNS name in lower case without a trailing dot, or ``None`` if it is not one."""
    name = name.lower().removesuffix(".")
    if not name or len(name) > MAX_NAME_LENGTH:
        return None
    labels = name.split(".")
    if any(len(label) > MAX_LABEL_LENGTH or not _LABEL.fullmatch(label) for label in labels):
        return None
    if labels[-1].isdigit():
        return None  # "1.2.3" is a mistyped address, not a name
    return name


def format_entry(host: str, port: int | None, private: bool = False) -> str:
    """An allow-file line for ``host`` and ``port``."""
    ip = parse_ip(host)
    shown = f"[{ip}]" if isinstance(ip, ipaddress.IPv6Address) else host
    text = shown if port is None else f"{shown}:{port}"
    return f"{text} private" if private else text


@dataclass(frozen=True, slots=True)
class _RawEntry:
    host: str
    port: int | None
    private: bool
    source: str


def parse_entry(text: str, where: str) -> _RawEntry:
    """Parse one allow entry (``HOST[:PORT] [private]``); raise naming ``where``."""
    words = text.split()
    if not words:
        raise PolicyError(f"{where}: empty entry")
    private = False
    if len(words) == 2 and words[1] == "private":
        private = True
    elif len(words) != 1:
        raise PolicyError(
            f"{where}: expected 'HOST[:PORT]' optionally followed by 'private', got {text!r}"
        )
    host, port = _split_host_port(words[0], where)
    ip = parse_ip(host)
    if ip is not None:
        return _RawEntry(str(ip), port, private, where)
    if host.lower() == "gate":
        if port is None:
            raise PolicyError(f"{where}: a host service needs a port, like gate:5432: {text!r}")
        return _RawEntry("gate", port, private, where)
    wildcard = host.startswith("*.")
    name = normalise_name(host[2:] if wildcard else host)
    if name is None or "*" in host[2 if wildcard else 0 :]:
        raise PolicyError(
            f"{where}: {host!r} is not a domain name, '*.domain', IP address or 'gate'"
        )
    if wildcard and "." not in name:
        raise PolicyError(f"{where}: {host!r} would allow a whole top-level domain")
    return _RawEntry(f"*.{name}" if wildcard else name, port, private, where)


def _lines(path: Path, label: str) -> Iterable[tuple[str, str]]:
    """Non-blank, non-comment lines of ``path`` with their ``label:line`` position."""
    raw = read_project_file(path, label, MAX_POLICY_FILE_BYTES)
    if raw is None:
        return
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{label}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for number, line in enumerate(text.splitlines(), start=1):
        content = line.split("#", 1)[0].strip()
        if content:
            yield f"{label}:{number}", content


def _parse_mode(value: str, where: str) -> NetMode:
    try:
        return NetMode(value)
    except ValueError:
        choices = ", ".join(mode.value for mode in NetMode)
        raise PolicyError(f"{where}: net must be one of {choices}, got {value!r}") from None


def _parse_gate(value: str, where: str) -> ipaddress.IPv4Address:
    try:
        address = ipaddress.IPv4Address(value)
    except ValueError:
        raise PolicyError(f"{where}: gate_addr must be an IPv4 address, got {value!r}") from None
    if address.is_loopback or address.is_unspecified or address.is_multicast:
        raise PolicyError(
            f"{where}: gate_addr {value!r} must not be loopback, 0.0.0.0 or multicast"
        )
    return address


def _parse_resolver(value: str, where: str) -> tuple[str, int]:
    host, port = _split_host_port(value, where)
    ip = parse_ip(host)
    if ip is None:
        raise PolicyError(f"{where}: resolver must be an IP address[:PORT], got {value!r}")
    return str(ip), 53 if port is None else port


def _parse_protect(value: str, project: Path, where: str) -> Path:
    """``protect = PATH``: a path of the project, relative to its root, never outside it."""
    if not value or "\0" in value:
        raise PolicyError(f"{where}: expected 'protect = PATH' (relative to {project})")
    if Path(value).is_absolute():
        raise PolicyError(f"{where}: protect = {value}: give a path relative to {project}")
    path = Path(os.path.normpath(project / value))
    resolved = path.resolve()
    if not path.is_relative_to(project) or not resolved.is_relative_to(project.resolve()):
        raise PolicyError(f"{where}: protect = {value}: outside the project root {project}")
    if path == project:
        raise PolicyError(f"{where}: protect = {value}: the whole project cannot be read-only")
    return path


def _parse_open(value: str, where: str) -> OpenAction:
    try:
        return OpenAction(value)
    except ValueError:
        choices = ", ".join(action.value for action in OpenAction)
        raise PolicyError(f"{where}: open must be one of {choices}, got {value!r}") from None


def _parse_url_form(value: str, where: str) -> UrlForm:
    try:
        return UrlForm(value)
    except ValueError:
        choices = ", ".join(form.value for form in UrlForm)
        raise PolicyError(f"{where}: url_form must be one of {choices}, got {value!r}") from None


def _parse_env(value: str, where: str) -> EnvSetting:
    name, equals, setting = value.partition("=")
    name = name.strip()
    if not equals or not ENV_NAME.fullmatch(name):
        raise PolicyError(f"{where}: expected 'env = NAME=VALUE', got a value for {name!r}")
    return EnvSetting(name, setting.strip(), where)


@dataclass
class PolicyBuilder:
    """Collects settings and entries in order; :meth:`build` gives the :class:`Policy`."""

    mode: Setting[NetMode] = DEFAULT_MODE
    gate_addr: Setting[ipaddress.IPv4Address] = DEFAULT_GATE
    resolver: Setting[tuple[str, int] | None] = SYSTEM_RESOLVER
    entries: list[_RawEntry] = field(default_factory=list)
    env: dict[str, EnvSetting] = field(default_factory=dict)
    protect: list[Setting[Path]] = field(default_factory=list)
    publish: list[PublishRule] = field(default_factory=list)
    open_action: Setting[OpenAction] | None = None
    url_form: Setting[UrlForm] | None = None
    project: Path | None = None
    files_read: list[Path] = field(default_factory=list)

    def read_project(self, project: Path) -> PolicyBuilder:
        """Read ``.sandbridge/config`` then ``.sandbridge/allow`` under ``project``."""
        self.project = project
        self.files_read = [
            project / f for f in (CONFIG_FILE, ALLOW_FILE) if (project / f).is_file()
        ]
        for where, line in _lines(project / CONFIG_FILE, str(CONFIG_FILE)):
            key, equals, value = line.partition("=")
            if not equals:
                raise PolicyError(f"{where}: expected 'key = value', got {_mask(line)!r}")
            self.set(key.strip(), value.strip(), where)
        for where, line in _lines(project / ALLOW_FILE, str(ALLOW_FILE)):
            self.entries.append(parse_entry(line, where))
        return self

    def set(self, key: str, value: str, where: str) -> None:
        """Apply one ``key = value`` setting (from the config file or a flag)."""
        if key == "net":
            self.mode = Setting(_parse_mode(value, where), where)
        elif key == "gate_addr":
            self.gate_addr = Setting(_parse_gate(value, where), where)
        elif key == "resolver":
            self.resolver = Setting(_parse_resolver(value, where), where)
        elif key == "allow":
            self.entries.append(parse_entry(value, where))
        elif key == "env":
            setting = _parse_env(value, where)
            self.env[setting.name] = setting
        elif key == "protect" and self.project is not None:
            self.protect.append(Setting(_parse_protect(value, self.project, where), where))
        elif key == "publish":
            self.publish.append(parse_rule(value, where))
        elif key == "open":
            self.open_action = Setting(_parse_open(value, where), where)
        elif key == "url_form":
            self.url_form = Setting(_parse_url_form(value, where), where)
        else:
            refuse_in_project(key, where)
            raise PolicyError(
                f"{where}: unknown key {key!r} "
                "(known: net, gate_addr, allow, env, resolver, protect, publish, open, url_form)"
            )

    def build(self) -> Policy:
        """Sort the entries into host services and proxy rules against the final gate."""
        gate = str(self.gate_addr.value)
        rules: list[Rule] = []
        services: dict[int, HostService] = {}
        for entry in self.entries:
            if entry.host in ("gate", gate):
                if entry.port is None:
                    raise PolicyError(
                        f"{entry.source}: a host service needs a port, like {gate}:5432"
                    )
                if entry.port == PROXY_PORT:
                    raise PolicyError(
                        f"{entry.source}: port {PROXY_PORT} of the gate is the egress proxy"
                    )
                services.setdefault(entry.port, HostService(entry.port, entry.source))
            else:
                rules.append(Rule(entry.host, entry.port, entry.private, entry.source))
        self._check_publish()
        return Policy(
            mode=self.mode,
            gate_addr=self.gate_addr,
            resolver=self.resolver,
            rules=tuple(rules),
            host_services=tuple(sorted(services.values(), key=lambda s: s.port)),
            env=tuple(self.env.values()),
            protect=tuple(self.protect),
            open_action=self.open_action,
            url_form=self.url_form,
            files_read=tuple(self.files_read),
            publish=tuple(self.publish),
            project=self.project,
        )

    def _check_publish(self) -> None:
        """Auto-publish watches the sandbox's own network namespace; with ``net = full``
        the sandbox has none (it sees the host's listeners), so the two are refused together."""
        if self.mode.value is not NetMode.FULL or not publishes_any(self.publish):
            return
        rule = next(r for r in self.publish if publishes_any([r]))
        raise PolicyError(
            f"{rule.source}: publish = {rule.ports} watches the sandbox's own network, but "
            f"net = full ({self.mode.source}) shares the host's; use net allow or none, or "
            "--publish PORT"
        )


def load_policy(  # noqa: PLR0913  (keyword-only flags, each adding to the files)
    project: Path,
    *,
    net: str | None = None,
    gate_addr: str | None = None,
    resolver: str | None = None,
    allow: Iterable[str] = (),
    publish: Iterable[str] = (),
    secrets: Iterable[EnvSetting] = (),
    profile_allow: Iterable[tuple[str, str]] = (),
) -> Policy:
    """The effective policy: the project's files, the secrets file's variables
    (``secrets``, read by project/secrets_file.py; they win over ``env`` lines of the
    config), an agent profile's hosts (``profile_allow``: entry and source, as
    ``agent profile claude (FILE)``), then the flags on top."""
    builder = PolicyBuilder().read_project(project)
    for value, source in profile_allow:
        builder.set("allow", value, source)
    secrets = tuple(secrets)
    for setting in secrets:
        builder.env[setting.name] = setting
    if secrets:
        builder.files_read.append(project / SECRETS_FILE)
    if net is not None:
        builder.set("net", net, "--net")
    if gate_addr is not None:
        builder.set("gate_addr", gate_addr, "--gate-addr")
    if resolver is not None:
        builder.set("resolver", resolver, "--resolver")
    for value in allow:
        builder.set("allow", value, "--allow")
    for value in publish:
        builder.set("publish", value, "--publish")
    return builder.build()


def served_lines(policy: Policy) -> list[tuple[str, str, str]]:
    """What the host half of a session needs of ``policy`` (mode, gate, resolver, entries,
    publish rules) as ``(key, value, source)`` settings: the daemon rebuilds the policy
    from them with :func:`from_lines`, checking every line again."""
    lines = [
        ("net", policy.mode.value.value, policy.mode.source),
        ("gate_addr", policy.gate, policy.gate_addr.source),
    ]
    resolver = policy.resolver.value
    if resolver is not None:
        lines.append(("resolver", format_entry(*resolver), policy.resolver.source))
    lines += [("allow", f"gate:{s.port}", s.source) for s in policy.host_services]
    lines += [("allow", rule.text, rule.source) for rule in policy.rules]
    lines += [("publish", rule.text, rule.source) for rule in policy.publish]
    return lines


def from_lines(lines: Iterable[tuple[str, str, str]]) -> Policy:
    """The policy of :func:`served_lines`; a malformed line raises :class:`PolicyError`."""
    builder = PolicyBuilder()
    for key, value, where in lines:
        if key not in ("net", "gate_addr", "resolver", "allow", "publish"):
            raise PolicyError(f"{where}: {key!r} is not a setting the daemon takes")
        builder.set(key, value, where)
    return builder.build()


# --- printing -------------------------------------------------------------------------


def _mask(text: str) -> str:
    return mask_credentials(text)


def mask_credentials(text: str) -> str:
    """``text`` with any URL's user information replaced by ``***``."""
    return _URL_CREDENTIALS.sub(r"\g<scheme>***@", text)


def describe(policy: Policy) -> list[str]:
    """``--print-policy``: every setting and entry with its source; no value of ``env``."""

    def line(text: str, source: str) -> str:
        return f"{text:<52} ({source})"

    mode = policy.mode.value
    lines = [line(f"net = {mode.value}", policy.mode.source)]
    if mode is NetMode.FULL:
        lines.append("  the sandbox uses the host's network: nothing below is enforced")
    if mode is NetMode.NONE:
        lines.append("  loopback only: nothing below is reachable")
    lines.append(line(f"gate_addr = {policy.gate}", policy.gate_addr.source))
    resolver = policy.resolver.value
    shown = "system" if resolver is None else format_entry(resolver[0], resolver[1])
    lines.append(line(f"resolver = {shown}", policy.resolver.source))
    lines.append("host services (inside -> host):")
    for service in policy.host_services:
        lines.append(
            line(f"  {policy.gate}:{service.port} -> 127.0.0.1:{service.port}", service.source)
        )
    if not policy.host_services:
        lines.append("  (none)")
    lines.append(f"egress proxy at {policy.proxy_url}, destinations:")
    for rule in policy.rules:
        ports = str(rule.port) if rule.port else ",".join(str(p) for p in sorted(DEFAULT_PORTS))
        lines.append(line(f"  {mask_credentials(rule.text)}  ports {ports}", rule.source))
    if not policy.rules:
        lines.append("  (none)")
    for setting in policy.env:
        lines.append(line(f"env {setting.name} = (value hidden)", setting.source))
    for protected in policy.protect:
        lines.append(line(f"protect = {protected.value}", protected.source))
    for published in policy.publish:
        lines.append(line(f"publish = {published.text}", published.source))
    if policy.open_action is not None:
        lines.append(line(f"open = {policy.open_action.value.value}", policy.open_action.source))
    if policy.url_form is not None:
        lines.append(line(f"url_form = {policy.url_form.value.value}", policy.url_form.source))
    return lines
