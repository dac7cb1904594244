"""A test "internet" made of two network namespaces: the host's and the internet's.

Usage: ``unshare --net -- python net_world.py -- COMMAND...``

The namespace it starts in plays the host: loopback services (the "host services"), a
DNS server on ``127.0.0.1:DNS_PORT`` answering the test names, and one public-looking
address of its own (``selfpub.test``). A second namespace (``unshare --net`` again)
plays the internet: servers on public-looking addresses, reached from the host over a
veth pair and a route, as a real internet host would be. Then COMMAND (a ``sandbridge
run``) runs on the host side with its output passed through, and its status is the
world's. Every request any server receives is printed as ``HIT <server> <host header>
<path>`` on stderr, so a test can prove a refused destination was never contacted.

With ``NET_WORLD_FILES=DIR`` in the environment, ``pkgs.test`` (8.8.0.3, port 80) serves
the files under DIR: a test's own package index and registry, for real installs.
``mirror.test`` is such a host on a network that is not the internet (a company mirror, a
split-DNS name): it resolves to 192.0.2.3, a documentation-range address, which the
proxy reaches only for an entry that says ``private``; it serves the same files (as
``HIT mirror80`` lines), or answers ``hello from mirror80`` without them.
"""

from __future__ import annotations

import functools
import os
import shutil
import socketserver
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer

import dnslib
import dnslib.server

from sandbridge.sandbox.net_init import add_address, loopback_up

DNS_PORT = 5353
PUBLIC = "8.8.0.1"  # public.test, sub.wild.test (in the internet namespace)
OTHER = "8.8.0.2"  # other.test: never allowed (in the internet namespace)
SELF = "8.8.1.1"  # selfpub.test: a global address of the host itself
PKGS = "8.8.0.3"  # pkgs.test: the files of NET_WORLD_FILES (in the internet namespace)
MIRROR = "192.0.2.3"  # mirror.test: a non-global address (TEST-NET-1), reached by a route
NAMES = {
    "pkgs.test.": PKGS,
    "mirror.test.": MIRROR,
    "public.test.": PUBLIC,
    "sub.wild.test.": PUBLIC,
    "other.test.": OTHER,
    "loopy.test.": "127.0.0.1",
    "selfpub.test.": SELF,
}
# (server name, address, port): the internet's, then the host's.
INTERNET_SERVERS = [
    ("public80", PUBLIC, 80),
    ("public443", PUBLIC, 443),
    ("public8080", PUBLIC, 8080),
    ("other80", OTHER, 80),
]
HOST_SERVERS = [
    ("loopback80", "127.0.0.1", 80),
    ("service5432", "127.0.0.1", 5432),
    ("service5433", "127.0.0.1", 5433),
    ("selfpub80", SELF, 80),
]
# The link between host and internet: a /30 of private space, never a destination.
HOST_LINK, INTERNET_LINK = "10.99.0.1", "10.99.0.2"


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


def ip(*args: str) -> None:
    command = shutil.which("ip") or "/usr/sbin/ip"
    subprocess.run([command, *args], check=True)


class Server(ThreadingHTTPServer):
    def server_bind(self) -> None:
        # HTTPServer would look up the address's name (getfqdn): a DNS query that no
        # test server needs and that can wait for a resolver this namespace cannot reach.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "net-world", int(self.server_address[1])


class FilesHandler(SimpleHTTPRequestHandler):
    """Static files, each request printed as a ``HIT <server>`` line."""

    server_label = "pkgs80"

    def do_GET(self) -> None:
        name, host = self.server_label, self.headers.get("Host")
        print(f"HIT {name} {host} {self.path}", file=sys.stderr, flush=True)
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        pass


class MirrorFilesHandler(FilesHandler):
    server_label = "mirror80"


def serve_files(directory: str) -> None:
    for address, handler in ((PKGS, FilesHandler), (MIRROR, MirrorFilesHandler)):
        server = Server((address, 80), functools.partial(handler, directory=directory))
        threading.Thread(target=server.serve_forever, daemon=True).start()


def serve(servers: list[tuple[str, str, int]]) -> None:
    for name, address, port in servers:
        server = Server((address, port), handler_for(name))
        threading.Thread(target=server.serve_forever, daemon=True).start()


def internet() -> int:
    """The internet namespace: wait for the veth, configure, serve until stdin closes."""
    print("NETNS READY", flush=True)
    sys.stdin.readline()
    loopback_up()
    ip("addr", "add", f"{INTERNET_LINK}/30", "dev", "vnet")
    ip("link", "set", "vnet", "up")  # the host's side of the link is on-link: no route needed
    for address in (PUBLIC, OTHER, PKGS, MIRROR):
        add_address("lo", address)
    if os.environ.get("NET_WORLD_FILES"):
        serve_files(os.environ["NET_WORLD_FILES"])
    else:
        serve([("mirror80", MIRROR, 80)])
    serve(INTERNET_SERVERS)
    print("INTERNET READY", flush=True)
    sys.stdin.read()
    return 0


def wait_for(process: subprocess.Popen[bytes], line: bytes) -> None:
    assert process.stdout is not None
    got = process.stdout.readline()
    if got.strip() != line:
        raise SystemExit(f"net_world: expected {line!r} from the internet, got {got!r}")


def main() -> int:
    if sys.argv[1:2] == ["--internet"]:
        return internet()
    command = sys.argv[sys.argv.index("--") + 1 :]
    loopback_up()
    net = subprocess.Popen(
        ["unshare", "--net", "--", sys.executable, __file__, "--internet"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert net.stdin is not None
    try:
        wait_for(net, b"NETNS READY")
        ip("link", "add", "vhost", "type", "veth", "peer", "name", "vnet", "netns", str(net.pid))
        ip("addr", "add", f"{HOST_LINK}/30", "dev", "vhost")
        ip("link", "set", "vhost", "up")
        ip("route", "add", "8.8.0.0/24", "via", INTERNET_LINK)
        ip("route", "add", f"{MIRROR}/32", "via", INTERNET_LINK)
        net.stdin.write(b"go\n")
        net.stdin.flush()
        wait_for(net, b"INTERNET READY")
        add_address("lo", SELF)
        serve(HOST_SERVERS)
        quiet = dnslib.server.DNSLogger(log="-request,-reply,-truncated,-error", prefix=False)
        dns = dnslib.server.DNSServer(Names(), port=DNS_PORT, address="127.0.0.1", logger=quiet)
        dns.start_thread()
        print("WORLD READY", file=sys.stderr, flush=True)
        return subprocess.call(command)
    finally:
        net.stdin.close()
        net.wait(10)


if __name__ == "__main__":
    sys.exit(main())
