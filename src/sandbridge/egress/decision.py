"""Egress decisions (sans-I/O): may the sandbox reach this destination, and if not,
why and which allow-file line would let it.

The host's egress gate asks :func:`match_destination` for a name and port,
:func:`check_addresses` for the addresses it resolved, and
:func:`host_service_decision` for a port of the gate address; it does the I/O itself.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection
from dataclasses import dataclass

from sandbridge.project.policy import (
    ALLOW_FILE,
    DEFAULT_PORTS,
    Policy,
    Rule,
    format_entry,
    host_matches,
    normalise_name,
    parse_ip,
)
from sandbridge.protocol.contract import PROXY_PORT


@dataclass(frozen=True, slots=True)
class Decision:
    """An egress decision: allowed by ``rule``, or refused with ``reason`` and a fix."""

    allowed: bool
    reason: str
    rule: Rule | None = None
    # The allow-file line that would allow the destination (refusals only).
    suggestion: str | None = None
    # The entry that decided and must change for ``suggestion`` to take effect: a line
    # added after it would never be reached (the first matching entry decides).
    decided_by: Rule | None = None

    def refusal_text(self, destination: str) -> str:
        """What a refused client reads: the destination, why, and the line that allows it."""
        text = f"egress to {destination} refused: {self.reason}"
        if self.suggestion:
            text += f"; to allow it, {self.fix()}"
        return text

    def fix(self) -> str:
        """What to write where for ``suggestion`` to take effect, in words."""
        rule = self.decided_by
        if rule is None:
            return f"add the line '{self.suggestion}' to {ALLOW_FILE}"
        if rule.host.startswith("*."):  # the wildcard stays for the domain's other names
            return (
                f"add the line '{self.suggestion}' above '{rule.text}' ({rule.source}), "
                "which decides first"
            )
        if is_file_line(rule.source):
            return f"edit {rule.source} to read '{self.suggestion}'"
        return f"change the entry '{rule.text}' ({rule.source}) to '{self.suggestion}'"


def is_file_line(source: str) -> bool:
    """Whether an entry's source is a line of a policy file (``.sandbridge/allow:3``)."""
    path, _, line = source.rpartition(":")
    return path.startswith(str(ALLOW_FILE.parent)) and line.isdigit()


def normalise_host(host: str) -> str | None:
    """A destination host as rules spell it (compressed IP or lower-case name), else None."""
    ip = parse_ip(host)
    if ip is not None:
        return str(ip)
    if host.startswith("["):
        return None
    return normalise_name(host)


def match_destination(policy: Policy, host: str, port: int) -> Decision:  # noqa: PLR0911  (one return per kind of refusal, in the order a reader checks them)
    """Decide a proxy destination before resolution (``host`` as the client sent it)."""
    normal = normalise_host(host)
    if normal is None:
        return Decision(False, f"{host!r} is not a valid host name or IP address")
    if not 1 <= port <= 65535:
        return Decision(False, f"port {port} is out of range")
    ip = parse_ip(normal)
    if ip is not None and str(ip) == policy.gate:
        return Decision(
            False,
            "the gate address is not reachable through the proxy; connect to a host "
            "service at the gate address directly (no proxy)",
        )
    for rule in policy.rules:
        if rule.matches(normal, port):
            return Decision(True, f"allowed by '{rule.text}' ({rule.source})", rule)
    port_part = None if port in DEFAULT_PORTS else port
    if ip is not None:
        return Decision(
            False,
            "IP-literal destinations are refused unless the policy names the address",
            suggestion=format_entry(normal, port_part),
        )
    if any(host_matches(rule.host, normal) for rule in policy.rules):
        return Decision(
            False,
            f"port {port} is not allowed for {normal} (only "
            f"{', '.join(str(p) for p in sorted(DEFAULT_PORTS))} unless an entry names it)",
            suggestion=format_entry(normal, port),
        )
    return Decision(
        False, f"{normal} is not in the allowlist", suggestion=format_entry(normal, port_part)
    )


def embedded_ipv4(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 one delivers to, and how (``"v4-mapped"``...), if any.

    A v4-mapped address is the IPv4 address; a 6to4 (``2002::/16``) or Teredo
    (``2001::/32``) address reaches the IPv4 address it embeds through a tunnel, so
    ``2002:7f00:1::1`` can end at ``127.0.0.1`` while looking like a public IPv6 address.
    """
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped, "v4-mapped"
    if address.sixtofour is not None:
        return address.sixtofour, "6to4"
    if address.teredo is not None:
        return address.teredo[1], "Teredo"  # (server, client): packets end at the client
    return None


def address_kind(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
    local: Collection[ipaddress.IPv4Address | ipaddress.IPv6Address] = (),
) -> str | None:
    """Why ``address`` is not a public destination (``"loopback"``...), or None if it is.

    ``local`` are the host's own addresses: a global one of them is still ``"this host"``,
    since what listens there is the host's, not the internet's. An IPv6 address that
    carries an IPv4 one (:func:`embedded_ipv4`) is refused when the IPv4 address would be.
    """
    embedded = embedded_ipv4(address)
    if embedded is not None:
        inner, form = embedded
        kind = address_kind(inner, local)
        if form == "v4-mapped":
            return kind  # the IPv4 address itself: nothing else to judge
        if kind is not None:
            return f"{kind} via {form}"
        if form == "6to4":
            # Refused whatever its IPv4 address: a 6to4 prefix routes into the network
            # behind that address (a router's LAN), not to it alone. Python's own table
            # says so only in some releases (2002::/16 is private in 3.13, 3.12.4 and
            # later, and Debian 12's patched 3.11.2; pyenv's 3.11.7 calls it global): the
            # decision must not change with the host's Python.
            return "6to4"
    for kind in ("loopback", "link_local", "private", "unspecified", "multicast", "reserved"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    if not address.is_global:
        return "non-global"
    return "this host" if address in local else None


def check_addresses(
    decision: Decision,
    host: str,
    port: int,
    addresses: list[ipaddress.IPv4Address | ipaddress.IPv6Address],
    local: Collection[ipaddress.IPv4Address | ipaddress.IPv6Address] = (),
) -> tuple[list[ipaddress.IPv4Address | ipaddress.IPv6Address], Decision]:
    """The addresses an allowed destination may be connected to, after resolution.

    A name's loopback, private, link-local and this host's own (``local``) addresses are
    dropped unless its rule says ``private``; an IP literal the policy names is used as it
    is. If nothing is left, the decision becomes a refusal naming the address refused.
    """
    rule = decision.rule
    assert rule is not None, "check_addresses needs an allowing decision"
    if rule.private or parse_ip(rule.host) is not None:
        usable = list(addresses)
    else:
        usable = [address for address in addresses if address_kind(address, local) is None]
    if usable:
        return usable, decision
    if not addresses:
        return [], Decision(False, f"{host} does not resolve to any address")
    first = addresses[0]
    # The name itself, not a wildcard it fell under: the line must open no other name.
    named = (normalise_host(host) or rule.host) if rule.host.startswith("*.") else rule.host
    return [], Decision(
        False,
        f"{host} resolves to {first} ({address_kind(first, local)}), which names may only "
        "reach when their entry says 'private'",
        suggestion=format_entry(named, rule.port if rule.port else None, private=True),
        decided_by=rule,
    )


def host_service_decision(policy: Policy, port: int) -> Decision:
    """Decide a connection to ``port`` of the gate address (a host service or the proxy)."""
    for service in policy.host_services:
        if service.port == port:
            return Decision(True, f"allowed by '{policy.gate}:{port}' ({service.source})")
    if port == PROXY_PORT:
        return Decision(True, "the egress proxy")
    return Decision(
        False,
        f"port {port} of the gate address is not a host service of this policy",
        suggestion=f"{policy.gate}:{port}",
    )
