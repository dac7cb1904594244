"""The gate listener without an event loop: what the sandbox entry serves on the gate
ports of an ``allow``-mode sandbox.

The first connection a sandboxed ``pip install`` or ``npm install`` makes goes to the
egress proxy through a gate port, so in the default network mode the gate is what every
session serves; on asyncio (:mod:`sandbridge.egress.gate_listener`) it would cost the
entry more memory than everything else in it. This module bridges each accepted
connection to the host's ``egress.sock`` on the entry's
:class:`~sandbridge.aio.poll_loop.PollLoop` with the standard library's ``socket``
alone, and goes on doing so, by the same code, once the loop has moved onto the event
loop (:meth:`~sandbridge.aio.poll_loop.PollLoop.move_to`).

The bridge is the asyncio gate listener's: the opening line, the answer read by
:class:`~sandbridge.protocol.egress_opening.AnswerReader` within
:data:`~sandbridge.protocol.egress_opening.ANSWER_TIMEOUT`, then bytes both ways. Each
connection is a small state machine (:class:`_State`) driven by readiness callbacks, so
a silent, slow or flooding connection holds up no other, nor the command's end. Each
direction holds at most :data:`CHUNK_BYTES`: while the far side does not read, this
side stops reading (backpressure). An end of stream is passed on as a half-close; once
both directions have ended, both sockets close; a failing side ends both. It decides
nothing: the host checks every opening against the policy and logs its decision.
"""

from __future__ import annotations

import enum
import socket
from collections.abc import Callable

from sandbridge.aio.poll_loop import Acceptor, PollLoop, Timer
from sandbridge.exceptions import WireError
from sandbridge.protocol import egress_opening as egress

# What one direction of a bridged connection holds at most: one read, not yet written.
# Under the C library's mmap threshold (128 KiB), so a read reuses heap memory instead
# of mapping and unmapping its buffer; two per connection bound its memory.
CHUNK_BYTES = 64 * 1024


class _State(enum.Enum):
    ANSWER = "waiting for the host's answer"
    BRIDGING = "copying both ways"
    DONE = "done"


class LightGate:
    """Serves the gate ports' listening sockets (port -> socket, bound by the entry) on
    ``loop``, each connection bridged to ``egress_socket``."""

    def __init__(
        self, loop: PollLoop, listeners: dict[int, socket.socket], egress_socket: str
    ) -> None:
        self._loop = loop
        self._egress_socket = str(egress_socket)
        self._connections: set[_Bridge] = set()
        self._acceptors = [
            Acceptor(loop, sock, self._acceptor_for(port)) for port, sock in listeners.items()
        ]

    def start(self) -> None:
        """Accept connections on every gate port."""
        for acceptor in self._acceptors:
            acceptor.start()

    def close(self) -> None:
        """Stop accepting and end every bridged connection (the session is ending)."""
        for acceptor in self._acceptors:
            acceptor.stop()
        for connection in list(self._connections):
            connection.close()

    @property
    def serving(self) -> int:
        """Connections open here."""
        return len(self._connections)

    def _acceptor_for(self, port: int) -> Callable[[socket.socket], None]:
        return lambda inner: self._accepted(port, inner)

    def _accepted(self, port: int, inner: socket.socket) -> None:
        try:
            host = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        except OSError:  # out of descriptors: as if the host were unreachable
            inner.close()
            return
        try:
            # A Unix connect completes at once, or fails (its backlog full: EAGAIN).
            host.setblocking(False)
            host.connect(self._egress_socket)
            # The first bytes on a new connection: its buffer has room for them.
            host.send(egress.encode_open(port))
        except OSError:  # the host is gone or swamped: the client sees a reset
            host.close()
            inner.close()
            return
        self._connections.add(_Bridge(self, inner, host))

    def _forget(self, connection: _Bridge) -> None:
        self._connections.discard(connection)


class _Direction:
    """Bytes from ``src`` to ``dst``, at most one chunk held: while it waits to be
    written, ``src`` is not read."""

    def __init__(self, bridge: _Bridge, src: socket.socket, dst: socket.socket) -> None:
        self._bridge = bridge
        self._loop = bridge._loop
        self._src = src
        self._dst = dst
        self._pending = memoryview(b"")
        self._ended = False  # src's end of stream (read only once nothing is pending)
        self.done = False  # src ended and dst was half-closed

    def start(self, first: bytes = b"") -> None:
        """Copy, after writing ``first``."""
        self._pending = memoryview(first)
        if first:
            self._write()
        else:
            self._loop.add_reader(self._src.fileno(), self._readable)

    def stop(self) -> None:
        """Watch neither socket (both are about to close)."""
        self._loop.remove_reader(self._src.fileno())
        self._loop.remove_writer(self._dst.fileno())

    def _readable(self) -> None:
        try:
            data = self._src.recv(CHUNK_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._bridge.close()
            return
        if not data:
            self._loop.remove_reader(self._src.fileno())
            self._ended = True
            self._finish()
            return
        self._pending = memoryview(data)
        self._write()

    def _write(self) -> None:
        """Write what is pending; what does not fit waits for room, and ``src`` waits."""
        try:
            sent = self._dst.send(self._pending)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._bridge.close()
            return
        self._pending = self._pending[sent:]
        if self._pending:
            self._loop.remove_reader(self._src.fileno())
            self._loop.add_writer(self._dst.fileno(), self._writable)
        elif not self._ended:
            self._loop.add_reader(self._src.fileno(), self._readable)

    def _writable(self) -> None:
        self._loop.remove_writer(self._dst.fileno())
        self._write()

    def _finish(self) -> None:
        try:
            self._dst.shutdown(socket.SHUT_WR)
        except OSError:  # the far side is gone: so is this connection
            self._bridge.close()
            return
        self.done = True
        self._bridge.direction_done()


class _Bridge:
    """One gate connection: ``inner`` (the sandboxed client's TCP connection) and
    ``host`` (to ``egress.sock``, the opening sent)."""

    def __init__(self, gate: LightGate, inner: socket.socket, host: socket.socket) -> None:
        self._gate = gate
        self._loop = gate._loop
        self._inner = inner
        self._host = host
        self._state = _State.ANSWER
        self._answers = egress.AnswerReader()
        self._timer: Timer | None = self._loop.call_later(egress.ANSWER_TIMEOUT, self.close)
        self._outward = _Direction(self, inner, host)
        self._inward = _Direction(self, host, inner)
        self._loop.add_reader(host.fileno(), self._answer_readable)

    def _answer_readable(self) -> None:
        try:
            data = self._host.recv(egress.MAX_EGRESS_OPEN_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        try:
            answer = self._answers.feed(data)
        except WireError:  # not an answer: nothing is bridged
            self.close()
            return
        if answer is None:
            return
        if answer.error is not None:  # refused: the host logged why
            self.close()
            return
        self._loop.remove_reader(self._host.fileno())
        self._cancel_timer()
        self._state = _State.BRIDGING
        self._outward.start()
        self._inward.start(answer.rest)

    def direction_done(self) -> None:
        if self._outward.done and self._inward.done:
            self.close()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        if self._state is _State.DONE:
            return
        if self._state is _State.ANSWER:
            self._loop.remove_reader(self._host.fileno())
        else:
            self._outward.stop()
            self._inward.stop()
        self._cancel_timer()
        self._state = _State.DONE
        self._gate._forget(self)
        self._host.close()
        self._inner.close()
