"""Which index names resolve to non-global addresses only: asked of a real DNS server
(dnslib, on a free loopback port) through the resolver the proxy uses."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import dnslib
import dnslib.server
import pytest

from sandbridge.egress.gate import DnsResolver
from sandbridge.survey.index_addresses import non_global_names

NAMES = {
    "mirror.test.": ["192.0.2.3"],  # documentation range: a company mirror's address
    "split.test.": ["10.0.0.8", "fd00::8"],
    "public.test.": ["8.8.0.1"],
    "mixed.test.": ["192.0.2.3", "8.8.0.1"],  # the global one is reached without private
    "loop.test.": ["127.0.0.1"],
}


class Names(dnslib.server.BaseResolver):  # type: ignore[misc]
    def resolve(self, request: dnslib.DNSRecord, handler: object) -> dnslib.DNSRecord:
        reply = request.reply()
        name = str(request.q.qname).lower()
        for address in NAMES.get(name, []):
            v6 = ":" in address
            if request.q.qtype == (dnslib.QTYPE.AAAA if v6 else dnslib.QTYPE.A):
                rdata = dnslib.AAAA(address) if v6 else dnslib.A(address)
                kind = dnslib.QTYPE.AAAA if v6 else dnslib.QTYPE.A
                reply.add_answer(dnslib.RR(name, kind, rdata=rdata, ttl=5))
        if name not in NAMES:
            reply.header.rcode = dnslib.RCODE.NXDOMAIN
        return reply


@pytest.fixture
def dns_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    quiet = dnslib.server.DNSLogger(log="-request,-reply,-truncated,-error", prefix=False)
    server = dnslib.server.DNSServer(Names(), port=port, address="127.0.0.1", logger=quiet)
    server.start_thread()
    yield port
    server.stop()


def test_names_of_non_global_addresses_only_are_named_with_what_they_resolve_to(
    dns_port: int,
) -> None:
    names = ["mirror.test", "split.test", "public.test", "mixed.test", "loop.test", "gone.test"]
    found = asyncio.run(non_global_names(names, DnsResolver("127.0.0.1", dns_port)))
    assert found == {
        "mirror.test": "mirror.test resolves to 192.0.2.3 (private) and no global address",
        "split.test": "split.test resolves to 10.0.0.8 (private) and no global address",
        "loop.test": "loop.test resolves to 127.0.0.1 (loopback) and no global address",
    }
