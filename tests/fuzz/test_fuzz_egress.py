"""Fuzzing the egress proxy's decision path and the policy's entry parser.

Same mutation engine and bounds as :mod:`tests.fuzz.test_fuzz_parsers`. Invariants: a
proxy head is refused with a 4xx or decided; an allowed destination really lies under an
entry of the policy (never a neighbour that merely looks alike); an entry line is refused
with a :class:`PolicyError` or parses into an entry that writes back to itself.
"""

from __future__ import annotations

import random
from pathlib import Path

from sandbridge.egress.decision import match_destination, normalise_host
from sandbridge.exceptions import HttpError, PolicyError, WireError
from sandbridge.project.policy import DEFAULT_PORTS, format_entry, load_policy, parse_entry
from sandbridge.protocol import egress_opening as egress
from sandbridge.protocol.http.parser import RequestHead, RequestReader
from sandbridge.protocol.http.proxy_target import split_absolute_url, split_authority
from tests.fuzz.test_fuzz_parsers import pieces, run

POLICY = load_policy(
    Path("/nonexistent"),
    allow=["example.com", "*.pkg.example:8443", "203.0.113.7:443", "gate:5432"],
)
HEADS = [
    b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
    b"CONNECT a.pkg.example:8443 HTTP/1.1\r\nHost: a.pkg.example:8443\r\n\r\n",
    b"CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n",
    b"GET http://example.com/x?y HTTP/1.1\r\nHost: example.com\r\n\r\n",
    b"GET http://203.0.113.7:443/ HTTP/1.1\r\nHost: 203.0.113.7:443\r\n\r\n",
]
ENTRIES = [
    b"example.com",
    b"*.pkg.example:8443",
    b"203.0.113.7:443",
    b"[2001:db8::1]:443 private",
    b"gate:5432",
    b"git.corp.example private",
]


def _under_a_rule(host: str, port: int) -> bool:
    for rule in POLICY.rules:
        port_ok = port in DEFAULT_PORTS if rule.port is None else port == rule.port
        name_ok = (
            host.endswith(rule.host[1:]) and host != rule.host[2:]
            if rule.host.startswith("*.")
            else host == rule.host
        )
        if port_ok and name_ok:
            return True
    return False


def test_proxy_heads_are_refused_or_decided_within_the_policy() -> None:
    def target(rng: random.Random, data: bytes) -> None:
        reader = RequestReader()
        try:
            for piece in pieces(rng, data):
                for event in reader.feed(piece):
                    if not isinstance(event, RequestHead):
                        continue
                    if event.method == b"CONNECT":
                        host, port = split_authority(event.target, None)
                    else:
                        host, port, _ = split_absolute_url(event.target)
                    decision = match_destination(POLICY, host, port)
                    if decision.allowed:
                        normal = normalise_host(host)
                        assert normal is not None and _under_a_rule(normal, port), (host, port)
                    else:
                        assert decision.reason
                    return
        except HttpError as refused:
            assert 400 <= refused.status <= 505

    run(target, HEADS, 11)


def test_entry_lines_are_refused_or_round_trip() -> None:
    def target(rng: random.Random, data: bytes) -> None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return
        try:
            entry = parse_entry(text, "fuzz:1")
        except PolicyError as refused:
            assert str(refused).startswith("fuzz:1: ")
            return
        again = parse_entry(format_entry(entry.host, entry.port, entry.private), "fuzz:2")
        assert (again.host, again.port, again.private) == (entry.host, entry.port, entry.private)

    run(target, ENTRIES, 12)


def test_egress_openings_are_refused_or_name_a_port() -> None:
    def target(rng: random.Random, data: bytes) -> None:
        try:
            port = egress.decode_open(data)
        except WireError:
            return
        assert 1 <= port <= 65535

    run(target, [egress.encode_open(5432), egress.encode_open(18081)], 13)
