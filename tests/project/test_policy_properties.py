"""Properties of the policy's decisions for any destination."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from sandbridge.egress.decision import check_addresses, embedded_ipv4, match_destination
from sandbridge.project.policy import load_policy

LABEL = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=10)
NAME = (
    st.lists(LABEL, min_size=2, max_size=4)
    .map(".".join)
    .filter(lambda name: not name.rsplit(".", 1)[1].isdigit())
)
PORT = st.integers(min_value=1, max_value=65535)
IPV4 = st.ip_addresses(v=4).filter(lambda ip: str(ip) != "100.64.0.1")
IPV6 = st.ip_addresses(v=6)
# Random IPv6 addresses almost never fall in 2002::/16: make 6to4 ones from IPv4 addresses.
SIXTOFOUR = IPV4.map(lambda v4: ipaddress.IPv6Address((0x2002 << 112) | (int(v4) << 80)))
EXISTING = load_policy(Path("/nonexistent"), allow=["example.com", "*.corp.example:8080"])


@given(st.one_of(NAME, IPV4.map(str), IPV6.map(lambda ip: f"[{ip}]")), PORT)
def test_the_suggested_line_allows_exactly_what_was_refused(host: str, port: int) -> None:
    decision = match_destination(EXISTING, host, port)
    if decision.allowed:
        return
    assert decision.suggestion is not None
    fixed = load_policy(Path("/nonexistent"), allow=[decision.suggestion])
    assert match_destination(fixed, host, port).allowed


def _reaches_only_global(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """A v4-mapped address is its IPv4 address; a 6to4 one never (it reaches the network
    behind its IPv4 address: docs/network.md); Teredo needs both parts global."""
    embedded = embedded_ipv4(address)
    if embedded is None:
        return address.is_global
    inner, form = embedded
    if form == "6to4":
        return False
    return inner.is_global and (form == "v4-mapped" or address.is_global)


@given(NAME, PORT, st.lists(st.one_of(IPV4, IPV6, SIXTOFOUR), max_size=4))
def test_without_private_a_name_never_reaches_a_non_global_address(
    name: str, port: int, addresses: list[ipaddress.IPv4Address | ipaddress.IPv6Address]
) -> None:
    policy = load_policy(Path("/nonexistent"), allow=[f"{name}:{port}"])
    decision = match_destination(policy, name, port)
    assert decision.allowed
    usable, final = check_addresses(decision, name, port, addresses)
    assert all(_reaches_only_global(address) for address in usable)
    if not usable and addresses:
        assert not final.allowed and final.suggestion == f"{name}:{port} private"


@given(NAME, PORT)
def test_a_name_entry_never_allows_a_subdomain_or_a_parent(name: str, port: int) -> None:
    policy = load_policy(Path("/nonexistent"), allow=[f"{name}:{port}"])
    assert not match_destination(policy, f"x.{name}", port).allowed
    assert not match_destination(policy, name.split(".", 1)[1], port).allowed
    assert not match_destination(policy, f"x{name}", port).allowed
