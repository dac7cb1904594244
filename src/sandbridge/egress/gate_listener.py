"""The gate listener inside an ``allow``-mode sandbox, on the event loop: gate ports to
the host's egress gate.

For each gate port (the egress proxy's and each host service's) it listens on
``GATE:PORT`` and forwards every accepted connection over one Unix connection to
``egress.sock``, naming the port. It decides nothing: the sandbox can replace or bypass
it, so the host checks every opening against the policy itself.

``sandbridge shim --gate`` (a sandbox another runtime starts) serves it; the sandbox
entry of a sandbox sandbridge runs serves the same bridge without an event loop
(:mod:`sandbridge.egress.light_gate`). Both read the host's answer with
:class:`~sandbridge.protocol.egress_opening.AnswerReader`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from pathlib import Path

from sandbridge import log
from sandbridge.aio.open_connections import OpenConnections
from sandbridge.aio.unix_sockets import COPY_READ_BYTES, close_writer, copy_both_ways
from sandbridge.exceptions import WireError
from sandbridge.protocol import egress_opening as egress


class GateListener:
    """TCP listeners on the gate address, each bridged to the host's egress gate."""

    def __init__(self, address: str, ports: list[int], egress_socket: Path) -> None:
        self.address = address
        self.ports = ports
        self.egress_socket = egress_socket
        self._servers: list[asyncio.Server] = []
        self._open = OpenConnections()

    async def start(self, bound: dict[int, socket.socket] | None = None) -> None:
        """Listen on every gate port (before the command starts), on the sockets already
        ``bound`` to them where given (the sandbox entry binds them before the command)."""
        for port in self.ports:
            handler = functools.partial(self._serve, port)
            if bound is not None and port in bound:
                server = await asyncio.start_server(handler, sock=bound[port])
            else:
                server = await asyncio.start_server(handler, self.address, port, reuse_address=True)
            self._servers.append(server)

    async def close(self) -> None:
        """Stop listening and end every bridged connection."""
        for server in self._servers:
            server.close()
        await self._open.close()
        for server in self._servers:
            await server.wait_closed()

    async def _serve(
        self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        with self._open.handler(writer):
            await self._bridge(port, reader, writer)

    async def _bridge(
        self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            host_reader, host_writer = await asyncio.open_unix_connection(self.egress_socket)
        except OSError as exc:
            log.debug("gate.unreachable", reason=str(exc))
            await close_writer(writer)
            return
        try:
            host_writer.write(egress.encode_open(port))
            async with asyncio.timeout(egress.ANSWER_TIMEOUT):
                answer = await _answer(host_reader)
            if answer.error is not None:
                log.debug("gate.refused", port=port, reason=answer.error)
                return
            if answer.rest:
                writer.write(answer.rest)
            with self._open.track(host_writer):
                await copy_both_ways(reader, writer, host_reader, host_writer, grace=None)
        except (WireError, TimeoutError, OSError) as exc:
            log.debug("gate.failed", port=port, reason=str(exc))
        finally:
            await close_writer(host_writer)
            with contextlib.suppress(OSError):
                await close_writer(writer)


async def _answer(reader: asyncio.StreamReader) -> egress.Answer:
    answers = egress.AnswerReader()
    while True:
        answer = answers.feed(await reader.read(COPY_READ_BYTES))
        if answer is not None:
            return answer
