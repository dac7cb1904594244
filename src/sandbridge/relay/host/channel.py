"""One socket of the relay's data path, read and written by one task: :class:`Channel`.

It replaces ``asyncio.StreamReader``/``StreamWriter`` on the host's data path, for two
measured costs of theirs:

* copies: a StreamReader appends every received ``bytes`` to a ``bytearray`` and cuts a
  new ``bytes`` out of it on each ``read``; two copies of every byte of a 100 MiB body.
  A channel hands over the very ``bytes`` objects the event loop received;
* per-call overhead: ``read`` and ``drain`` are a handful of Python frames and a future
  per call in the streams; here a read that finds data waiting returns at once, and a
  drain costs one attribute test while the transport is not paused.

Memory stays bounded as with the streams: past ``limit`` unread bytes the transport
stops reading until the task catches up, and the transport's write buffer limits pause
the writing task (:meth:`drain`). After a ``101``, :meth:`hand_over` moves the socket
to a :class:`~sandbridge.aio.unix_sockets.Pump` with whatever was still unread.

While a keep-alive connection waits for its next request, a :class:`Lane` may take the
received bytes straight from the event loop's callback instead (the relay's callback
path for small exchanges, see :class:`~sandbridge.relay.listener.lane.KeepAliveLane`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
from collections.abc import Callable
from typing import Protocol, cast

from sandbridge.aio.unix_sockets import LINGER_BYTES, LINGER_SECONDS, Pump


class Lane(Protocol):
    """Takes a channel's events from the event loop's callbacks while it is attached."""

    def received(self, channel: Channel, data: bytes) -> None: ...

    def interrupted(self, channel: Channel) -> None:
        """End of stream or connection lost: the channel has recorded it as usual."""


# One read from either socket. 256 KiB keeps syscalls per byte low on bulk transfers
# while bounding what one connection can hold per direction.
READ_BYTES = 256 * 1024


class Channel(asyncio.Protocol):
    """A connection whose received bytes wait for :meth:`read` (up to ``limit``)."""

    def __init__(self, limit: int, on_made: Callable[[Channel], None] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._on_made = on_made
        self._limit = limit
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._reading_paused = False
        self._eof = False
        self._exception: Exception | None = None
        self._read_waiter: asyncio.Future[None] | None = None
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None
        self.closed = self._loop.create_future()  # done once the connection is lost
        # While set, received bytes go to the lane, not to read(); see ready_for_exchange.
        self.lane: Lane | None = None
        # How long a write may wait for the peer to take bytes (None: as long as it
        # takes). A browser's connection has one: one that reads nothing would
        # otherwise hold its place, and its app connection, past every other timeout.
        self.drain_timeout: float | None = None
        # The host alone holds this socket (the sandbox never had its descriptor): only
        # such an app connection may be parked in the front door's pool (:mod:`.front`).
        self.host_only = False

    # protocol callbacks -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but behave as one.
        self.transport = cast(asyncio.Transport, transport)
        if self._on_made is not None:
            self._on_made(self)

    def data_received(self, data: bytes) -> None:
        lane = self.lane
        if lane is not None:
            lane.received(self, data)
            return
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > self._limit and not self._reading_paused:
            self._reading_paused = True
            assert self.transport is not None
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake_reader()
        if self.lane is not None:
            self.lane.interrupted(self)
        return True  # keep the other direction open: a response may still be sent

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        if exc is not None:
            self._exception = exc
        self._wake_reader()
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionResetError("connection lost"))
        if not self.closed.done():
            self.closed.set_result(None)
        if self.lane is not None:
            self.lane.interrupted(self)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake_reader(self) -> None:
        waiter, self._read_waiter = self._read_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # the task's side ----------------------------------------------------------------

    def ready_for_exchange(self) -> bool:
        """Whether the connection can start a new exchange at once: nothing unread (a
        byte waiting here would be taken for the next message), no end of stream, no
        error, and room in the write buffer (a lane writes without waiting)."""
        transport = self.transport
        return not (
            self._chunks
            or self._eof
            or self._exception is not None
            or self._write_paused
            or transport is None
            or transport.is_closing()
        )

    def has_data(self) -> bool:
        """Whether received bytes wait for :meth:`read` (which then returns at once)."""
        return bool(self._chunks)

    def at_end(self) -> bool:
        """Whether the peer closed or reset the connection."""
        return self._eof

    async def read(self) -> bytes:
        """Everything received and not yet read; ``b""`` at end of stream.

        Cancelling a read loses nothing: the bytes stay for the next one.
        """
        if not self._chunks:
            if self._exception is not None:
                raise self._exception
            if self._eof:
                return b""
            if self._read_waiter is not None:
                raise RuntimeError("another task is already reading this channel")
            waiter = self._read_waiter = self._loop.create_future()
            try:
                await waiter
            finally:
                self._read_waiter = None
            if not self._chunks:
                if self._exception is not None:
                    raise self._exception
                return b""
        return self.take()

    def take(self) -> bytes:
        """What :meth:`read` returns when bytes are waiting (:meth:`has_data`): all of
        them, at once; ``b""`` if there are none."""
        chunks = self._chunks
        if not chunks:
            return b""
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered = 0
        if self._reading_paused:
            self._reading_paused = False
            assert self.transport is not None
            self.transport.resume_reading()
        return data

    def write(self, data: bytes) -> None:
        """Write without waiting; a connection already lost is a ConnectionResetError
        (uvloop raises a RuntimeError for it)."""
        transport = self.transport
        assert transport is not None
        if transport.is_closing():
            raise ConnectionResetError("connection lost")
        transport.write(data)

    async def drain(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark."""
        if self._exception is not None:
            raise self._exception
        assert self.transport is not None
        if self.transport.is_closing():
            raise ConnectionResetError("connection lost")
        if self._write_paused:
            waiter = self._drain_waiter = self._loop.create_future()
            if self.drain_timeout is None:
                await waiter
                return
            try:
                async with asyncio.timeout(self.drain_timeout):
                    await waiter
            except TimeoutError:
                self.abort()  # (a close would wait for good to send what is buffered)
                raise ConnectionResetError(
                    f"peer took nothing for {self.drain_timeout:g} s"
                ) from None

    async def send(self, data: bytes) -> None:
        """Write ``data`` and wait until the transport can take more."""
        self.write(data)
        # The usual case (nothing to wait for, nothing to raise) skips drain's
        # coroutine: one less per send, two sends per request.
        if self.send_waits():
            await self.drain()

    def send_waits(self) -> bool:
        """Whether a :meth:`send` now would go on to :meth:`drain`: a write buffer over
        its high-water mark (drain waits), an error or a closing transport (drain
        raises)."""
        assert self.transport is not None
        return self._write_paused or self._exception is not None or self.transport.is_closing()

    async def wait_closed(self) -> None:
        """Until the connection is gone, after :meth:`close` or :meth:`abort`. A close
        first sends what is buffered, which a peer that reads nothing would make wait
        for good: past ``drain_timeout`` the connection is dropped instead."""
        closed = self.closed
        transport = self.transport
        if (
            closed.done()
            or self.drain_timeout is None
            or transport is None
            or not transport.get_write_buffer_size()
        ):
            await closed
            return
        try:
            async with asyncio.timeout(self.drain_timeout):
                await asyncio.shield(closed)
        except TimeoutError:
            self.abort()
            await closed

    def abort(self) -> None:
        """Drop the connection at once."""
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        """Close once what was written is sent."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    async def linger_close(self) -> None:
        """Half-close after a refusal, then drain the peer briefly so the refusal arrives
        (closing with unread bytes resets the connection, which can destroy it)."""
        await self.drain()
        assert self.transport is not None
        if self.transport.can_write_eof():
            self.transport.write_eof()
        with contextlib.suppress(TimeoutError, OSError):
            async with asyncio.timeout(LINGER_SECONDS):
                discarded = 0
                while discarded < LINGER_BYTES and (data := await self.read()):
                    discarded += len(data)

    def hand_over(self, pump: Pump) -> None:
        """Give the socket to ``pump``: from now on the event loop calls the pump.

        Call :meth:`catch_up` once every pump of the tunnel has its socket."""
        assert self.transport is not None
        pump.connection_made(self.transport)
        self.transport.set_protocol(pump)
        pump.lost.add_done_callback(self._pump_lost)

    def _pump_lost(self, _: asyncio.Future[None]) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def releasable(self) -> bool:
        """Whether :meth:`release` may take the socket: nothing unread, nothing unsent,
        no end of stream and no error yet (all of which only the transport could pass on)."""
        transport = self.transport
        return not (
            transport is None
            or transport.is_closing()
            or self._chunks
            or self._eof
            or self._exception is not None
            or transport.get_write_buffer_size()
            or transport.get_extra_info("socket") is None
        )

    def release(self) -> int:
        """The socket for another owner (the C tunnel, :mod:`.tunnel`): a duplicate of
        its descriptor; the transport is dropped without sending anything (no end of
        stream: the socket lives on in the duplicate). Only when :meth:`releasable`.
        The new owner reports the socket's end with :meth:`closed_elsewhere`."""
        assert self.releasable() and self.transport is not None
        fd = os.dup(self.transport.get_extra_info("socket").fileno())
        self.transport.set_protocol(_Released())
        self.transport.abort()
        return fd

    def closed_elsewhere(self) -> None:
        """The owner the socket was released to closed it."""
        if not self.closed.done():
            self.closed.set_result(None)

    def catch_up(self, pump: Pump) -> None:
        """Pass on to ``pump`` what happened before :meth:`hand_over`: unread bytes, an
        end of stream, a full write buffer."""
        assert self.transport is not None
        if self._write_paused:
            pump.pause_writing()
        if self._chunks:
            unread = b"".join(self._chunks)
            self._chunks.clear()
            self._buffered = 0
            pump.data_received(unread)
        if self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()
        if self._eof:
            pump.eof_received()


class _Released(asyncio.Protocol):
    """Takes a released transport's last callback (its socket lives on elsewhere)."""
