"""A transport for a socket whose open file the sandbox shares: :class:`SharedSocketTransport`.

Threat: a socket the sandbox hands over (the app's connection, :mod:`sandbridge.relay.handoff`)
is the very open file the sandbox still holds a copy of, and ``O_NONBLOCK`` is a flag of
the open file, not of a descriptor. Any process in the sandbox can replace the shim at
``upstream.sock``, hand over a socket, keep its copy and clear ``O_NONBLOCK`` through it
after the host set it. uvloop's (and asyncio's) transports call plain ``write()`` and
``recv()``, which on a blocking socket wait for the peer: once the app's page posted a
body its app did not read, the host's event loop stopped in ``write()``, and with it every
app, terminal and egress decision the process serves (in the daemon, every session's).

Defence: this transport passes ``MSG_DONTWAIT`` on every ``recv`` and ``send``, which the
kernel honours whatever the file's flags say; nothing the sandbox sets on its copy can
make a call wait. It is a small selector transport over the loop's ``add_reader`` and
``add_writer``, with the flow control of asyncio's (write buffer limits that pause the
protocol, ``pause_reading``), enough for :class:`~sandbridge.relay.channel.Channel` and
:class:`~sandbridge.aio.unix_sockets.Pump`. Its socket is a duplicate from
:func:`~sandbridge.aio.untrusted_fds.for_transport`, so closing it is never the last close.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

# What one read takes at most: a relay read (the Unix hop's buffer, upstream.py).
READ_BYTES = 256 * 1024
# asyncio's own defaults: the protocol is paused past 64 KiB buffered and resumed at 16.
HIGH_WATER = 64 * 1024
LOW_WATER = 16 * 1024


class SharedSocketTransport(asyncio.Transport):
    """A stream transport whose every ``recv`` and ``send`` passes ``MSG_DONTWAIT``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol: asyncio.Protocol,
    ) -> None:
        super().__init__({"socket": sock})
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._buffer = bytearray()
        self._closing = False
        self._lost = False
        self._reading = False
        self._eof_pending = False
        self._eof_sent = False
        self._protocol_paused = False
        self._high = HIGH_WATER
        self._low = LOW_WATER
        protocol.connection_made(self)
        if not self._closing:
            self.resume_reading()

    # reading -------------------------------------------------------------------------

    def is_reading(self) -> bool:
        return self._reading

    def pause_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if not self._reading and not self._closing:
            self._reading = True
            self._loop.add_reader(self._fd, self._read_ready)

    def _read_ready(self) -> None:
        try:
            data = self._sock.recv(READ_BYTES, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fatal(exc)
            return
        if data:
            self._protocol.data_received(data)
            return
        self.pause_reading()
        if not self._protocol.eof_received():
            self.close()

    # writing -------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._eof_pending or not data:
            return
        if not self._buffer:
            try:
                sent = self._sock.send(data, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._fatal(exc)
                return
            if sent == len(data):
                return
            self._buffer += memoryview(data)[sent:]
            self._loop.add_writer(self._fd, self._write_ready)
        else:
            self._buffer += data
        self._maybe_pause_protocol()

    def _write_ready(self) -> None:
        try:
            sent = self._sock.send(self._buffer, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fatal(exc)
            return
        del self._buffer[:sent]
        self._maybe_resume_protocol()
        if self._buffer:
            return
        self._loop.remove_writer(self._fd)
        if self._closing:
            self._lose(None)
        elif self._eof_pending:
            self._shut_write()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if self._closing or self._eof_pending:
            return
        self._eof_pending = True
        if not self._buffer:
            self._shut_write()

    def _shut_write(self) -> None:
        if self._eof_sent:
            return
        self._eof_sent = True
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError as exc:
            self._fatal(exc)

    def get_write_buffer_size(self) -> int:
        return len(self._buffer)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._high = HIGH_WATER if high is None else high
        self._low = self._high // 4 if low is None else low
        self._maybe_pause_protocol()

    def _maybe_pause_protocol(self) -> None:
        if len(self._buffer) > self._high and not self._protocol_paused:
            self._protocol_paused = True
            self._protocol.pause_writing()

    def _maybe_resume_protocol(self) -> None:
        if self._protocol_paused and len(self._buffer) <= self._low:
            self._protocol_paused = False
            self._protocol.resume_writing()

    # ending --------------------------------------------------------------------------

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Stop reading; once what is buffered is sent, the connection is lost."""
        if self._closing:
            return
        self._closing = True
        self.pause_reading()
        if not self._buffer:
            self._loop.call_soon(self._lose, None)

    def abort(self) -> None:
        self._fatal(None)

    def _fatal(self, exc: Exception | None) -> None:
        self._closing = True
        self.pause_reading()
        if self._buffer:
            self._buffer.clear()
            self._loop.remove_writer(self._fd)
        self._loop.call_soon(self._lose, exc)

    def _lose(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._loop.remove_writer(self._fd)
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._sock.close()  # a duplicate: never the last close (untrusted_fds)

    # the rest of the interface -------------------------------------------------------

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        assert isinstance(protocol, asyncio.Protocol)
        self._protocol = protocol

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        try:
            if name == "peername":
                return self._sock.getpeername()
            if name == "sockname":
                return self._sock.getsockname()
        except OSError:  # closed, or the peer gone
            return default
        return super().get_extra_info(name, default)
