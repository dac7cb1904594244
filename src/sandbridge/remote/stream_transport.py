"""A stream of the remote link as an asyncio transport: :class:`StreamTransport`.

Both ends of an app connection on the link are asyncio protocols: on the laptop the app
listener's :class:`~sandbridge.relay.host.channel.Channel` for its upstream, on the far side
a :class:`~sandbridge.aio.unix_sockets.Pump` to the app's socket. A stream used to be
copied to and from them by two tasks (``splice.py``), and on the laptop through a
socket pair as well: a task wake-up per chunk each way, and on the laptop two system
calls and two event-loop callbacks more. As a transport, the stream hands what the
link brings to its protocol from the mux's read callback, and sends what the protocol
writes as DATA frames at once: no task and no socket pair on the data path.

Flow control is the link's own, unchanged:

- received bytes are credited back as they are handed to the protocol; while the
  protocol has paused reading (a channel's buffer is full, a pump's peer cannot take
  more) they wait here uncredited, so the peer can have at most one window
  (:data:`~sandbridge.protocol.remote_wire.STREAM_WINDOW`) waiting, as before;
- written bytes go out as far as the stream's credit goes and while the link's own
  buffer is short (:attr:`Mux.congested <sandbridge.remote.mux.Mux.congested>`); the
  rest waits here, and past :data:`WRITE_HIGH_WATER` the protocol is told to pause
  writing, until it is under :data:`WRITE_LOW_WATER` again.

An end of stream crosses as a half close (``write_eof``, ``eof_received``). ``close``
sends what is buffered, then EOF; data the peer still sends after it is answered with a
RESET, as a closed socket answers with a reset. A RESET from the peer, or the link
lost, is ``connection_lost`` with a ``ConnectionResetError`` naming why.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from sandbridge.remote.mux import Mux, MuxStream

# What a transport keeps beyond its credit before its protocol must pause writing: a
# read of the app's socket or two; the credit (2 MiB) is what keeps a bulk stream busy.
WRITE_HIGH_WATER = 256 * 1024
WRITE_LOW_WATER = 64 * 1024


class StreamTransport(asyncio.Transport):
    """The transport of ``protocol`` over ``stream`` (already open) of ``mux``."""

    def __init__(self, mux: Mux, stream: MuxStream, protocol: asyncio.BaseProtocol) -> None:
        super().__init__()
        self._mux = mux
        self._stream = stream
        self._id = stream.id
        self._protocol: Any = protocol
        self._loop = asyncio.get_running_loop()
        self._held: collections.deque[bytes] = collections.deque()  # received, not credited
        self._reading_paused = False
        self._peer_ended = False  # the peer's EOF came (handed on once _held is empty)
        self._eof_given = False
        self._unsent: collections.deque[bytes] = collections.deque()  # beyond the credit
        self._unsent_bytes = 0
        self._high = WRITE_HIGH_WATER
        self._low = WRITE_LOW_WATER
        self._writing_paused = False
        self._eof_wanted = False  # write_eof or close: EOF once _unsent is out
        self._closing = False
        self._lost = False  # connection_lost called, or about to be
        protocol.connection_made(self)
        stream.attach(self)

    # the mux's side (StreamSink) ----------------------------------------------------

    def received(self, data: bytes) -> None:
        if self._closing:
            # Closed here as a socket is: what still comes is refused, once.
            self._stream.reset("the connection was closed")
            return
        if self._reading_paused or self._held:
            self._held.append(data)
            return
        self._protocol.data_received(data)
        self._mux.consumed(self._stream, len(data))

    def eof(self) -> None:
        self._peer_ended = True
        if not self._held:
            self._give_eof()

    def ended(self, reason: str) -> None:
        self._held.clear()
        self._unsent.clear()
        self._unsent_bytes = 0
        self._lose(ConnectionResetError(reason))

    def credited(self) -> None:
        self._send()

    # sending ------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._eof_wanted or self._lost or not data:
            return
        chunk = data if isinstance(data, bytes) else bytes(data)
        if not self._unsent and not self._mux.congested:
            credit = self._mux.state.send_credit_for(self._id)
            if len(chunk) <= credit:  # the usual case: out at once, nothing kept
                self._mux.write_now(self._mux.state.send_data(self._id, chunk))
                return
        self._unsent.append(chunk)
        self._unsent_bytes += len(chunk)
        self._mux.queued(self._stream, len(chunk))
        self._send()
        if self._mux.held > self._mux.held_budget:
            self._mux.check_budget()  # what waits for credit counts toward it too

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def _send(self) -> None:
        """Send what is kept, as far as the credit and the link's room go."""
        mux, unsent = self._mux, self._unsent
        while unsent:
            if mux.congested:
                mux.when_room(self._id, self._send)
                break
            credit = mux.state.send_credit_for(self._id)
            if credit == 0:
                break  # a CREDIT from the peer calls this again
            chunk = unsent.popleft()
            if len(chunk) > credit:
                chunk, rest = chunk[:credit], chunk[credit:]
                unsent.appendleft(rest)
            self._unsent_bytes -= len(chunk)
            mux.queued(self._stream, -len(chunk))
            mux.write_now(mux.state.send_data(self._id, chunk))
        if self._lost:
            return
        if self._unsent_bytes > self._high:
            if not self._writing_paused:
                self._writing_paused = True
                self._protocol.pause_writing()
        elif self._writing_paused and self._unsent_bytes <= self._low:
            self._writing_paused = False
            self._protocol.resume_writing()
        if not unsent and self._eof_wanted:
            self._stream.write_eof()
            if self._closing:
                self._lose(None)

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if not (self._eof_wanted or self._lost):
            self._eof_wanted = True
            self._send()

    def get_write_buffer_size(self) -> int:
        return self._unsent_bytes

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._high = WRITE_HIGH_WATER if high is None else high
        self._low = min(self._high // 4 if low is None else low, self._high)

    # receiving ----------------------------------------------------------------------

    def pause_reading(self) -> None:
        self._reading_paused = True

    def resume_reading(self) -> None:
        if not self._reading_paused:
            return
        self._reading_paused = False
        held = self._held
        while held and not self._reading_paused and not self._lost:
            data = held.popleft()
            self._protocol.data_received(data)
            self._mux.consumed(self._stream, len(data))
        if self._peer_ended and not held:
            self._give_eof()

    def is_reading(self) -> bool:
        return not self._reading_paused

    def _give_eof(self) -> None:
        if self._eof_given or self._lost:
            return
        self._eof_given = True
        if not self._protocol.eof_received():
            self.close()

    # the end ------------------------------------------------------------------------

    def close(self) -> None:
        if self._closing or self._lost:
            return
        self._closing = True
        self._held.clear()
        self._mux.release(self._stream, self._stream.held)
        self._eof_wanted = True
        self._send()

    def abort(self) -> None:
        if self._lost:
            return
        self._lost = True  # connection_lost(None), not the reset's own error
        self._held.clear()
        self._unsent.clear()
        self._unsent_bytes = 0
        self._stream.reset("the connection was aborted")
        self._loop.call_soon(self._call_connection_lost, None)

    def is_closing(self) -> bool:
        return self._closing or self._lost

    def _lose(self, exc: Exception | None) -> None:
        if not self._lost:
            self._lost = True
            self._loop.call_soon(self._call_connection_lost, exc)

    def _call_connection_lost(self, exc: Exception | None) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is not None:
            protocol.connection_lost(exc)

    # the rest of asyncio.Transport --------------------------------------------------

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        protocol: asyncio.BaseProtocol = self._protocol
        return protocol

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"remote_stream": self._id}.get(name, default)
