"""A test "internet" inside a network namespace the test made (``unshare --net``).

Usage: ``unshare --net -- python net_world.py -- COMMAND...``

It brings ``lo`` up, gives it public-looking addresses, serves HTTP on them and on the
namespace's loopback (the "host services"), answers DNS for the test names on
``127.0.0.1:DNS_PORT``, then runs COMMAND (a ``sandbridge run``) with its output passed
through and exits with its status. Every request any server received is printed as
``HIT <server> <host header> <path>`` on stderr, so a test can prove a refused
destination was never contacted.
"""

from __future__ import annotations

import ipaddress
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dnslib
import dnslib.server

from sandbridge.runner.net_init import add_address
from sandbridge.runner.unshare_init import loopback_up

DNS_PORT = 5353
PUBLIC = "8.8.0.1"  # public.test, sub.wild.test
OTHER = "8.8.0.2"  # other.test: never allowed
NAMES = {
    "public.test.": PUBLIC,
    "sub.wild.test.": PUBLIC,
    "other.test.": OTHER,
    "loopy.test.": "127.0.0.1",
}
# (server name, address, port)
SERVERS = [
    ("public80", PUBLIC, 80),
    ("public443", PUBLIC, 443),
    ("public8080", PUBLIC, 8080),
    ("other80", OTHER, 80),
    ("loopback80", "127.0.0.1", 80),
    ("service5432", "127.0.0.1", 5432),
    ("service5433", "127.0.0.1", 5433),
]


def handler_for(name: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            print(f"HIT {name} {self.headers.get('Host')} {self.path}", file=sys.stderr, flush=True)
            body = f"hello from {name}\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


class Names(dnslib.server.BaseResolver):  # type: ignore[misc]
    def resolve(self, request: dnslib.DNSRecord, handler: object) -> dnslib.DNSRecord:
        reply = request.reply()
        name = str(request.q.qname).lower()
        if request.q.qtype == dnslib.QTYPE.A and name in NAMES:
            reply.add_answer(dnslib.RR(name, dnslib.QTYPE.A, rdata=dnslib.A(NAMES[name]), ttl=5))
        elif name not in NAMES:
            reply.header.rcode = dnslib.RCODE.NXDOMAIN
        return reply


def main() -> int:
    command = sys.argv[sys.argv.index("--") + 1 :]
    loopback_up()
    for address in (PUBLIC, OTHER):
        add_address("lo", ipaddress.IPv4Address(address))
    servers = []
    for name, address, port in SERVERS:
        server = ThreadingHTTPServer((address, port), handler_for(name))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    quiet = dnslib.server.DNSLogger(log="-request,-reply,-truncated,-error", prefix=False)
    dns = dnslib.server.DNSServer(Names(), port=DNS_PORT, address="127.0.0.1", logger=quiet)
    dns.start_thread()
    print("WORLD READY", file=sys.stderr, flush=True)
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
