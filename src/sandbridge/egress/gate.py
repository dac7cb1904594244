"""The host's egress gate on ``egress.sock``: host services and the egress proxy.

Every connection from the sandbox names a gate port (:mod:`sandbridge.protocol.egress_opening`). The
gate checks it against the session's policy itself (the in-sandbox listener is the
agent's to replace): a host-service port is connected to the host's ``127.0.0.1:PORT``;
the proxy port gets the HTTP/``CONNECT`` proxy; anything else is refused.

The proxy reads one request head strictly, decides its destination with
:mod:`sandbridge.project.policy`, resolves names here on the host, drops
addresses the policy does not allow, and connects. ``CONNECT`` then becomes a byte
tunnel; a plain HTTP request is re-sent in origin form with ``Connection: close``, its
body forwarded by its own framing, and nothing after it is read, so one proxy
connection is exactly one checked destination. Every decision goes to the egress log.

A first line that is an egress request (``sandbridge-allow``) goes to
:mod:`sandbridge.egress.request_server`; the owner's approvals are grants the proxy
decides with after the policy's own entries, and a refusal the owner could lift says
how to ask.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sandbridge import log
from sandbridge.aio.before_loop import bind_unix_socket
from sandbridge.aio.open_connections import OpenConnections
from sandbridge.aio.paced_server import PacedServer
from sandbridge.aio.unix_sockets import (
    COPY_READ_BYTES,
    close_writer,
    copy,
    copy_both_ways,
    linger_close,
    read_line,
)
from sandbridge.egress.decision import (
    Decision,
    check_addresses,
    embedded_ipv4,
    host_service_decision,
    match_destination,
    normalise_host,
)
from sandbridge.egress.log import MAX_FIELD_CHARS, MAX_REFUSED_DESTINATIONS, EgressLog
from sandbridge.egress.no_gate import OwnerOp
from sandbridge.egress.request_server import EgressRequests
from sandbridge.egress.requests import Grants
from sandbridge.exceptions import HttpError, WireError
from sandbridge.project.policy import NetMode, Policy, format_entry, parse_ip
from sandbridge.protocol import egress_opening as egress
from sandbridge.protocol.contract import PROXY_PORT
from sandbridge.protocol.http.fields import field_values
from sandbridge.protocol.http.forwarding import (
    LAST_CHUNK,
    Framing,
    encode_chunk,
    end_to_end_fields,
    request_framing,
)
from sandbridge.protocol.http.parser import (
    MESSAGE_END,
    BodyChunk,
    RequestHead,
    RequestReader,
    Upgraded,
)
from sandbridge.protocol.http.proxy_target import (
    proxy_refusal,
    same_authority,
    split_absolute_url,
    split_authority,
)
from sandbridge.protocol.limits import EGRESS_SOCKET_RATE

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# A client sends its request head at once; a proxy connection silent longer is dropped.
HEAD_TIMEOUT = 30.0
# Resolving a name and connecting to an allowed destination: a slow network, not a stuck one.
RESOLVE_TIMEOUT = 10.0
CONNECT_TIMEOUT = 15.0
# Open connections through the gate per session: a few per tool is plenty; the cap keeps a
# looping sandbox from using up the host's descriptors.
MAX_EGRESS_CONNECTIONS = 256


@dataclass(frozen=True, slots=True)
class EgressRefusal:
    """What the proxy answers instead of connecting: a status and a text naming why."""

    status: int
    text: str


class Resolver(Protocol):
    """Turns a name into addresses (the system's resolver, or a configured DNS server)."""

    async def resolve(self, name: str) -> list[Address]: ...


class SystemResolver:
    """``getaddrinfo`` on the host: what any host program would get."""

    async def resolve(self, name: str) -> list[Address]:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(name, None, type=socket.SOCK_STREAM)
        except socket.gaierror:
            return []
        found: list[Address] = []
        for info in infos:
            address = ipaddress.ip_address(info[4][0])
            if address not in found:
                found.append(address)
        return found


class DnsResolver:
    """A DNS server the policy names (``resolver = IP:PORT``), asked for A then AAAA."""

    def __init__(self, server: str, port: int) -> None:
        # Imported here: dnspython costs ~35 ms to import, and most sessions never ask it.
        import dns.asyncresolver

        self._resolver = dns.asyncresolver.Resolver(configure=False)
        self._resolver.nameservers = [server]
        self._resolver.port = port
        self._resolver.lifetime = RESOLVE_TIMEOUT

    async def resolve(self, name: str) -> list[Address]:
        import dns.exception
        import dns.resolver

        found: list[Address] = []
        for kind in ("A", "AAAA"):
            try:
                answer = await self._resolver.resolve(name, kind, search=False)
            except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer, dns.resolver.NoNameservers):
                continue
            except dns.exception.Timeout:
                break
            found += [ipaddress.ip_address(record.to_text()) for record in answer]
        return found


def is_local_address(address: Address) -> bool:
    """True if ``address`` belongs to this host: only a local address can be bound.

    (With ``net.ipv*.ip_nonlocal_bind`` set, every address looks local, and names
    reach only what their entry allows with ``private``: the check fails closed.)
    """
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((str(address), 0))
        except OSError:
            return False
    return True


def resolver_for(policy: Policy) -> Resolver:
    """The resolver the policy asks for (``resolver`` setting), else the system's."""
    configured = policy.resolver.value
    return SystemResolver() if configured is None else DnsResolver(*configured)


class EgressGate:
    """Serves ``egress.sock`` for one session with one policy."""

    def __init__(
        self,
        path: Path,
        policy: Policy,
        egress_log: EgressLog,
        resolver: Resolver | None = None,
        session: str = "session",
    ) -> None:
        self.path = path
        self.policy = policy
        self.log = egress_log
        self.resolver = resolver_for(policy) if resolver is None else resolver
        # The owner's approvals of egress requests (in memory, this session only).
        self.grants = Grants()
        self.requests = EgressRequests(
            session, policy, self.grants, is_local=is_local_address, resolve=self.resolve
        )
        self._server: PacedServer | None = None
        self._active = 0
        self._open = OpenConnections()
        # The allow-file line each refused destination's refusal named, for the owner's
        # summary (bounded as the log's tally bounds refused destinations).
        self._lines: dict[tuple[str, str], str | None] = {}

    def summary(self) -> list[dict[str, Any]]:
        """Each destination allowed or refused so far with its count; a refusal with the
        allow-file line its refusal named (None if no line would allow it)."""
        return [
            {
                "decision": tally.decision, "kind": tally.kind,
                "destination": tally.destination, "count": tally.count, "last": tally.last,
                "reason": tally.reason,
                "line": self._lines.get((tally.kind, tally.destination))
                if tally.decision == "refused" else None,
            }
            for tally in self.log.tallies()
        ]  # fmt: skip

    def owner_ops(self) -> dict[str, OwnerOp]:
        """The control-socket ops the owner uses: egress requests' and ``egress_summary``."""

        async def summary(message: dict[str, Any]) -> dict[str, Any]:
            return {"mode": NetMode.ALLOW.value, "destinations": self.summary()}

        return {**self.requests.owner_ops(), "egress_summary": summary}

    async def start(self) -> None:
        self._server = PacedServer(
            self._serve, bind_unix_socket(self.path), EGRESS_SOCKET_RATE, 1.0
        )

    async def close(self) -> None:
        """Stop accepting and end every open connection (tunnels included)."""
        if self._server is not None:
            self._server.close()
        await self._open.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self._open.handler(writer):
            await self._serve_one(reader, writer)

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._active += 1
        try:
            if self._active > MAX_EGRESS_CONNECTIONS:
                writer.write(
                    egress.encode_answer(f"more than {MAX_EGRESS_CONNECTIONS} open connections")
                )
                # Its opening is still unread: closing now would reset the connection and
                # could destroy the answer before the sandbox reads it.
                await linger_close(reader, writer)
                return
            try:
                async with asyncio.timeout(egress.EGRESS_OPEN_TIMEOUT):
                    line, rest = await read_line(reader, egress.MAX_EGRESS_LINE_BYTES)
                opening = egress.decode_opening(line)
            except (WireError, TimeoutError) as exc:
                writer.write(egress.encode_answer(str(exc) or "no opening line in time"))
                return
            if isinstance(opening, egress.EgressAsk):
                await self.requests.serve(opening, reader, writer)
                return
            port = opening
            decision = host_service_decision(self.policy, port)
            if not decision.allowed:
                self._record(decision, "host-service", f"{self.policy.gate}:{port}")
                writer.write(egress.encode_answer(decision.refusal_text(f"gate port {port}")))
                return
            if port == PROXY_PORT:
                writer.write(egress.encode_answer())
                await self._proxy(reader, writer, rest)
            else:
                await self._host_service(port, decision, reader, writer, rest)
        except OSError as exc:
            log.debug("egress.failed", reason=str(exc))
        finally:
            self._active -= 1
            await close_writer(writer)

    def _record(self, decision: Decision, kind: str, destination: str, address: str = "") -> None:
        key = (kind, destination[:MAX_FIELD_CHARS])
        if not decision.allowed and (
            key in self._lines or len(self._lines) < MAX_REFUSED_DESTINATIONS
        ):
            self._lines[key] = decision.suggestion
        self.log.record(
            "allowed" if decision.allowed else "refused",
            kind,
            destination,
            decision.reason,
            address or None,
        )

    async def _host_service(
        self,
        port: int,
        decision: Decision,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        rest: bytes,
    ) -> None:
        destination = f"{self.policy.gate}:{port}"
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        except (OSError, TimeoutError):
            failed = Decision(False, f"nothing answers on the host's 127.0.0.1:{port}")
            self._record(failed, "host-service", destination, "127.0.0.1")
            writer.write(egress.encode_answer(failed.reason))
            return
        self._record(decision, "host-service", destination, "127.0.0.1")
        writer.write(egress.encode_answer())
        if rest:
            up_writer.write(rest)
        try:
            with self._open.track(up_writer):
                await copy_both_ways(reader, writer, up_reader, up_writer, grace=None)
        finally:
            await close_writer(up_writer)

    # --- the proxy --------------------------------------------------------------------

    async def _refuse(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int, text: str
    ) -> None:
        writer.write(proxy_refusal(status, text))
        await linger_close(reader, writer)

    async def _proxy(  # noqa: PLR0912, PLR0915  (the proxy's steps in protocol order; split, the order would be spread over helpers)
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes
    ) -> None:
        parser = RequestReader()
        head: RequestHead | None = None
        events: list[object] = []
        try:
            async with asyncio.timeout(HEAD_TIMEOUT):
                while head is None:
                    if data:
                        events += parser.feed(data)
                        heads = [e for e in events if isinstance(e, RequestHead)]
                        if heads:
                            head = heads[0]
                            events = events[events.index(head) + 1 :]
                            break
                    data = await reader.read(COPY_READ_BYTES)
                    if not data:
                        return
        except TimeoutError:
            await self._refuse(reader, writer, 408, "no complete request head in time")
            return
        except HttpError as exc:
            await self._refuse(reader, writer, exc.status, str(exc))
            return
        try:
            if head.method == b"CONNECT":
                host, port = split_authority(head.target, None)
                path = b""
            else:
                host, port, path = split_absolute_url(head.target)
                hosts = field_values(head.headers, b"host")
                if len(hosts) != 1:
                    raise HttpError(400, f"expected one Host header, got {len(hosts)}")
                if not same_authority(split_authority(hosts[0], 80), (host, port)):
                    shown = hosts[0].decode("ascii", "replace")[:100]
                    self.log.record(
                        "refused", "proxy", f"{host}:{port}", f"Host header {shown!r} differs"
                    )
                    raise HttpError(
                        400, f"Host header {shown!r} does not match the URL's {host}:{port}"
                    )
        except HttpError as exc:
            await self._refuse(reader, writer, exc.status, str(exc))
            return
        connection = await self._connect(host, port)
        if isinstance(connection, EgressRefusal):
            await self._refuse(reader, writer, connection.status, connection.text)
            return
        up_reader, up_writer = connection
        try:
            with self._open.track(up_writer):
                if head.method == b"CONNECT":
                    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    for event in events:
                        if isinstance(event, Upgraded) and event.trailing:
                            up_writer.write(event.trailing)
                    await copy_both_ways(reader, writer, up_reader, up_writer, grace=None)
                else:
                    await self._forward_request(head, path, events, parser, reader, up_writer)
                    await copy(up_reader, writer)
        finally:
            await close_writer(up_writer)

    async def _connect(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | EgressRefusal:
        """Decide, resolve and connect; else the refusal to answer with."""
        destination = f"{host}:{port}"
        decision = match_destination(self.grants.policy(self.policy), host, port)
        if not decision.allowed:
            self._record(decision, "proxy", destination)
            hint = _ask_hint(host, port) if decision.suggestion else ""
            return EgressRefusal(403, decision.refusal_text(destination) + hint)
        # A grant for one connection is spent now, before any await, and given back
        # below if no connection is made with it.
        once = self.grants.spend(decision.rule)
        connection = await self._resolve_and_connect(host, port, decision)
        if isinstance(connection, EgressRefusal):
            self.grants.give_back(once)
        return connection

    async def resolve(self, name: str) -> list[Address]:
        """The addresses of ``name`` as the proxy connects to them (none past the bound)."""
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT):
                return await self.resolver.resolve(name)
        except TimeoutError:
            return []

    async def _resolve_and_connect(
        self, host: str, port: int, decision: Decision
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | EgressRefusal:
        destination = f"{host}:{port}"
        literal = parse_ip(host)
        found = [literal] if literal is not None else await self.resolve(host)
        # A 6to4 or Teredo address can end at one of the host's IPv4 addresses: probe those too.
        carried = [embedded[0] for address in found if (embedded := embedded_ipv4(address))]
        local = [address for address in (*found, *carried) if is_local_address(address)]
        usable, decision = check_addresses(decision, host, port, found, local)
        if not decision.allowed:
            self._record(decision, "proxy", destination, str(found[0]) if found else "")
            return EgressRefusal(403, decision.refusal_text(destination))
        for address in usable:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    connection = await asyncio.open_connection(str(address), port)
            except (OSError, TimeoutError):
                continue
            self._record(decision, "proxy", destination, str(address))
            return connection
        failed = Decision(False, f"could not connect to {', '.join(map(str, usable))}")
        self._record(failed, "proxy", destination)
        return EgressRefusal(502, f"egress to {destination} failed: {failed.reason}")

    async def _forward_request(  # noqa: PLR0913  (the request's head, path and the streams it moves between)
        self,
        head: RequestHead,
        path: bytes,
        events: list[object],
        parser: RequestReader,
        reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        """Send the request in origin form, then its body by its framing; stop after it."""
        framing = request_framing(head.headers)
        lines = [head.method + b" " + path + b" HTTP/1.1"]
        lines.extend(name + b": " + value for name, value in end_to_end_fields(head.headers))
        if framing is Framing.CHUNKED:
            lines.append(b"Transfer-Encoding: chunked")
        lines.append(b"Connection: close")
        up_writer.write(b"\r\n".join(lines) + b"\r\n\r\n")
        while True:
            for event in events:
                if isinstance(event, BodyChunk):
                    up_writer.write(
                        encode_chunk(event.data) if framing is Framing.CHUNKED else event.data
                    )
                elif event is MESSAGE_END:
                    if framing is Framing.CHUNKED:
                        up_writer.write(LAST_CHUNK)
                    await up_writer.drain()
                    return
            await up_writer.drain()
            data = await reader.read(COPY_READ_BYTES)
            if not data:
                return
            try:
                events = list(parser.feed(data))
            except HttpError:
                return


def _ask_hint(host: str, port: int) -> str:
    """How the sandbox asks the owner for a refused destination (when an entry would do)."""
    return (
        f"; or ask the owner from inside: sandbridge-allow "
        f"{format_entry(normalise_host(host) or host, port)} "
        '--reason "..."'
    )
