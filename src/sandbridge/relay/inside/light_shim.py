"""The shim without an event loop: what serves ``upstream.sock`` in a sandbox until
something needs asyncio.

Nearly every connection sandbridge's own host makes is a stream opening with a handoff
offer (:mod:`sandbridge.protocol.stream`): connect to the app on ``PORT``, pass the
connected socket back (``SCM_RIGHTS``), step out. That, and the refusal of a first line
that is not a request, is all this module serves, on the entry's
:class:`~sandbridge.aio.poll_loop.PollLoop` with the standard library's ``socket`` and
``json``: ``import asyncio`` would cost the shim more memory than everything else in
it. A connection that asks for more (a v1 exchange, a stream the shim relays, a first
line too long to be an opening) is passed, with the bytes read from it, to the event
loop's shim (:meth:`sandbridge.relay.inside.shim.Shim.adopt`); the entry loads the event loop
for the first one.

The rules are :mod:`sandbridge.protocol.shim_opening`'s, the event loop's shim's too:
the same limits, timeouts and answers. Each connection is a small state machine
(:class:`_State`) driven by readiness callbacks, so a silent or slow one never holds up
the others or the command's end. Only loopback is ever connected to: ``127.0.0.1``, else
``::1`` where that refused (:mod:`sandbridge.protocol.app_address`).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import os
import socket
import time
from collections.abc import Callable

from sandbridge.aio.poll_loop import Acceptor, PollLoop, Timer
from sandbridge.exceptions import WireError
from sandbridge.protocol import stream
from sandbridge.protocol.app_address import AppAttempts
from sandbridge.protocol.jsonline import LineReader
from sandbridge.protocol.shim_opening import (
    APP_CONNECT_TIMEOUT,
    FIRST_LINE_TIMEOUT,
    MAX_FIRST_LINE_BYTES,
    MAX_LIGHT_LINE_BYTES,
    HandOff,
    Refuse,
    connect_failed,
    decide,
    refusal,
)

TYPE_CHECKING = False  # typing's, without importing typing for it
if TYPE_CHECKING:
    import asyncio

# A connection the event loop's shim takes over: the socket, the bytes read from it,
# and how long its first line may still take.
Adopt = Callable[[socket.socket, bytes, float], None]


class _State(enum.Enum):
    READING = "reading the first line"
    CONNECTING = "connecting to the app"
    DONE = "done"


class LightShim:
    """Serves the listener ``upstream.sock`` on ``loop``. ``needs_loop`` is called when a
    connection needs the event loop's shim (after :meth:`continue_on`, it is passed
    straight on). The timeouts are the event loop's shim's (their defaults); a test may
    shorten them."""

    def __init__(
        self,
        listener: socket.socket,
        loop: PollLoop,
        needs_loop: Callable[[], None],
        *,
        first_line_timeout: float = FIRST_LINE_TIMEOUT,
        app_connect_timeout: float = APP_CONNECT_TIMEOUT,
    ) -> None:
        self._listener = listener
        self._loop = loop
        self._needs_loop = needs_loop
        self.first_line_timeout = first_line_timeout
        self.app_connect_timeout = app_connect_timeout
        self._connections: set[_Connection] = set()
        self._waiting: list[tuple[socket.socket, bytes, float]] = []
        self._adopt: Adopt | None = None
        self._acceptor = Acceptor(loop, listener, self._accepted)

    def start(self) -> None:
        """Accept connections on the listener."""
        self._acceptor.start()

    def stop_accepting(self) -> None:
        """Leave the listener to the event loop's shim; connections open are still served."""
        self._acceptor.stop()

    def continue_on(self, loop: asyncio.AbstractEventLoop, adopt: Adopt) -> None:
        """Go on serving the connections open on ``loop``, the running event loop, and
        give ``adopt`` every connection that needs it (those waiting, and any later)."""
        self.stop_accepting()
        self._loop.move_to(loop)
        self._adopt = adopt
        waiting, self._waiting = self._waiting, []
        for sock, received, first_line_left in waiting:
            adopt(sock, received, first_line_left)

    def close(self) -> None:
        """End every connection still served here (the session is ending)."""
        for connection in list(self._connections):
            connection.close()
        for sock, _, _ in self._waiting:
            sock.close()
        self._waiting.clear()

    @property
    def serving(self) -> int:
        """Connections open here."""
        return len(self._connections)

    def _accepted(self, sock: socket.socket) -> None:
        self._connections.add(_Connection(self, sock))

    def _pass_on(self, connection: _Connection, received: bytes, first_line_left: float) -> None:
        self._connections.discard(connection)
        sock = connection.detach()
        if self._adopt is not None:
            self._adopt(sock, received, first_line_left)
        else:
            self._waiting.append((sock, received, first_line_left))
            self._needs_loop()

    def _forget(self, connection: _Connection) -> None:
        self._connections.discard(connection)


class _Connection:
    """One connection from the host: its first line read, then decided."""

    def __init__(self, shim: LightShim, sock: socket.socket) -> None:
        self._shim = shim
        self._loop = shim._loop
        self._sock = sock
        self._state = _State.READING
        self._lines = LineReader(MAX_FIRST_LINE_BYTES)
        self._received = bytearray()
        self._deadline = time.monotonic() + shim.first_line_timeout
        self._timer: Timer | None = self._loop.call_later(shim.first_line_timeout, self._timed_out)
        self._app: socket.socket | None = None
        self._attempts = AppAttempts(0)
        self._loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            data = self._sock.recv(MAX_LIGHT_LINE_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # the host left
            self.close()
            return
        try:
            line = self._lines.feed(data) if data else self._lines.feed_eof()
        except WireError as exc:
            self._answer(refusal(str(exc)).answer)
            return
        self._received += data
        if line is None:
            if len(self._received) > MAX_LIGHT_LINE_BYTES:  # not an opening: a v1 request?
                self._pass_on()
            return
        decision = decide(line, self._lines.rest, ended=not data)
        if isinstance(decision, Refuse):
            self._answer(decision.answer)
        elif isinstance(decision, HandOff):
            self._connect(decision.port)
        else:
            self._pass_on()

    def _timed_out(self) -> None:
        self._timer = None
        if self._state is _State.READING:
            self._answer(refusal("timed out").answer)
        else:
            self._connect_failed(TimeoutError())

    def _connect(self, port: int) -> None:
        """Connect to the app, without waiting: a loopback connect is done at once,
        unless the app's accept queue is full."""
        self._stop_reading()
        self._state = _State.CONNECTING
        self._attempts = AppAttempts(port)
        self._try()

    def _try(self) -> None:
        """Connect to the attempts' current address; a refusal moves on to the next."""
        address = self._attempts.address
        try:
            self._app = socket.socket(
                address.family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
            )
            error = self._app.connect_ex((address.host, self._attempts.port))
        except OSError as exc:
            self._connect_failed(exc)
            return
        if error == 0:
            self._hand_off()
        elif error in (errno.EINPROGRESS, errno.EAGAIN):
            self._timer = self._loop.call_later(self._shim.app_connect_timeout, self._timed_out)
            self._loop.add_writer(self._app.fileno(), self._connect_done)
        else:
            self._connect_failed(OSError(error, os.strerror(error)))

    def _connect_done(self) -> None:
        assert self._app is not None
        self._loop.remove_writer(self._app.fileno())
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        error = self._app.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error:
            self._connect_failed(OSError(error, os.strerror(error)))
        else:
            self._hand_off()

    def _hand_off(self) -> None:
        """Give the connected socket to the host; the shim's part is over. One small
        write to a connection nothing was written to: its buffer is empty."""
        assert self._app is not None
        with contextlib.suppress(OSError):  # the host left; its side retries or refuses
            socket.send_fds(self._sock, [stream.encode_ack(handoff=True)], [self._app.fileno()])
        self.close()  # the host holds its own copy of the app's socket now (or nobody does)

    def _connect_failed(self, exc: OSError) -> None:
        if self._app is not None:
            self._loop.remove_writer(self._app.fileno())
            self._app.close()
            self._app = None
        if self._attempts.failed(exc):
            self._try()
        else:
            self._answer(connect_failed(self._attempts.error))

    def _answer(self, answer: bytes) -> None:
        """Write a refusal and close. Answers are a few hundred bytes at most, written
        once to a connection nothing was written to: they never wait for room."""
        with contextlib.suppress(OSError):  # the host left
            self._sock.send(answer)
        self.close()

    def _pass_on(self) -> None:
        self._stop_reading()
        self._shim._pass_on(self, bytes(self._received), self._deadline - time.monotonic())

    def _stop_reading(self) -> None:
        if self._state is _State.READING:
            self._loop.remove_reader(self._sock.fileno())
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def detach(self) -> socket.socket:
        """The host's socket, no longer served here."""
        self._state = _State.DONE
        return self._sock

    def close(self) -> None:
        if self._state is _State.DONE:
            return
        self._stop_reading()
        if self._app is not None:
            self._loop.remove_writer(self._app.fileno())
            self._app.close()
        self._state = _State.DONE
        self._shim._forget(self)  # first: the host sees the end only once it is over here
        self._sock.close()
