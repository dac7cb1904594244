"""Properties of the policy's decisions for any destination."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from sandbridge.runner.network_policy import (
    check_addresses,
    load_policy,
    match_destination,
)

LABEL = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=10)
NAME = (
    st.lists(LABEL, min_size=2, max_size=4)
    .map(".".join)
    .filter(lambda name: not name.rsplit(".", 1)[1].isdigit())
)
PORT = st.integers(min_value=1, max_value=65535)
IPV4 = st.ip_addresses(v=4).filter(lambda ip: str(ip) != "100.64.0.1")
IPV6 = st.ip_addresses(v=6)
EXISTING = load_policy(Path("/nonexistent"), allow=["example.com", "*.corp.example:8080"])


@given(st.one_of(NAME, IPV4.map(str), IPV6.map(lambda ip: f"[{ip}]")), PORT)
def test_the_suggested_line_allows_exactly_what_was_refused(host: str, port: int) -> None:
    decision = match_destination(EXISTING, host, port)
    if decision.allowed:
        return
    assert decision.suggestion is not None
    fixed = load_policy(Path("/nonexistent"), allow=[decision.suggestion])
    assert match_destination(fixed, host, port).allowed


@given(NAME, PORT, st.lists(st.one_of(IPV4, IPV6), max_size=4))
def test_without_private_a_name_never_reaches_a_non_global_address(
    name: str, port: int, addresses: list[ipaddress.IPv4Address | ipaddress.IPv6Address]
) -> None:
    policy = load_policy(Path("/nonexistent"), allow=[f"{name}:{port}"])
    decision = match_destination(policy, name, port)
    assert decision.allowed
    usable, final = check_addresses(decision, name, port, addresses)
    # A v4-mapped IPv6 address is judged by the IPv4 address it carries.
    assert all((getattr(address, "ipv4_mapped", None) or address).is_global for address in usable)
    if not usable and addresses:
        assert not final.allowed and final.suggestion == f"{name}:{port} private"


@given(NAME, PORT)
def test_a_name_entry_never_allows_a_subdomain_or_a_parent(name: str, port: int) -> None:
    policy = load_policy(Path("/nonexistent"), allow=[f"{name}:{port}"])
    assert not match_destination(policy, f"x.{name}", port).allowed
    assert not match_destination(policy, name.split(".", 1)[1], port).allowed
    assert not match_destination(policy, f"x{name}", port).allowed
