"""The remote link's asyncio side: :class:`Mux` runs the link's state
(:class:`~sandbridge.protocol.remote_wire.LinkState`) over a
:class:`~sandbridge.remote.transport.Link`, and :class:`MuxStream` is one app
connection on it.

One task reads the link (:meth:`Mux.run`) and hands each stream its bytes; every stream
is read and written by its own task. A stream holds at most one window of received
bytes (the peer may not send more before this side credits them back, which happens
as :meth:`MuxStream.read` hands them on), and :meth:`MuxStream.write` waits for credit:
a stalled browser or app stops its own stream and no other, and memory stays bounded:
what all streams hold together (unread, or kept for want of credit) stays within
:data:`LINK_HELD_BUDGET` (past it, the stream holding the most is reset), however many
windows a hostile peer fills or leaves uncredited.
When the link ends, every stream ends with it: readers see the end, writers a
``ConnectionResetError``.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Protocol

from sandbridge import log
from sandbridge.exceptions import RemoteLinkError, RemoteWireError
from sandbridge.protocol import remote_wire as wire
from sandbridge.protocol.limits import STREAM_OPEN_TIMEOUT
from sandbridge.remote.transport import Link

# One read from the link: a few frames at once, so the reading task wakes up rarely.
LINK_READ_BYTES = 256 * 1024
# Bytes waiting in the link's own send buffer (the SSH channel's, the pipe's) past which
# the mux waits for the link to drain before a stream transport sends more: what a slow
# link leaves queued stays this small, whatever the streams' credit would allow.
LINK_BACKLOG_BYTES = 256 * 1024
# Bytes held for all of a link's streams: received and not yet taken by their readers,
# or written and kept for want of credit. The protocol lets each stream hold one window
# (2 MiB), so a peer filling 1,024 streams nobody reads would make this side hold 2 GiB;
# past this budget the stream holding the most (the slowest reader: a stalled browser,
# app or peer) is reset instead, so one link costs at most this much whatever the peer
# does. 32 full windows: more stalled bulk
# streams at once than one person's browser keeps on one machine.
LINK_HELD_BUDGET = 64 * 1024 * 1024
# The peer's HELLO must arrive within this long after the link opened: a command that
# reaches no serve-stdio (a shell's banner, a wrong path) is said so, not waited on.
HELLO_TIMEOUT = 20.0


class StreamSink(Protocol):
    """What takes a stream's events from the mux's read callback instead of
    :meth:`MuxStream.read` and :meth:`MuxStream.write` (``remote/stream_transport.py``)."""

    def received(self, data: bytes) -> None: ...

    def eof(self) -> None: ...

    def ended(self, reason: str) -> None: ...

    def credited(self) -> None: ...


class MuxStream:
    """One byte stream on the link, both ways (an app connection)."""

    def __init__(self, mux: Mux, stream: int) -> None:
        self._mux = mux
        self.id = stream
        self._chunks: collections.deque[bytes] = collections.deque()
        self._ended = False  # the peer sent EOF, or the stream or link is gone
        self._lost: str | None = None  # why the stream was reset or the link lost
        self.link_lost = False  # it ended because the whole link did (not a reset)
        self._readable = asyncio.Event()
        self._credit = asyncio.Event()
        self.answer: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._sink: StreamSink | None = None
        self.held = 0  # bytes received and not yet taken by the reader (Mux.held's share)
        self.unsent = 0  # bytes its transport was given and keeps for want of credit

    def attach(self, sink: StreamSink) -> None:
        """Give the stream's events to ``sink`` from now on (what was received and not
        read yet first); :meth:`read` and :meth:`write` are not used any more."""
        self._sink = sink
        while self._chunks:
            sink.received(self._chunks.popleft())
        if self._lost is not None:
            sink.ended(self._lost)
        elif self._ended:
            sink.eof()

    async def read(self) -> bytes:
        """The next bytes received; ``b""`` once the peer sent EOF or the stream is gone."""
        while not self._chunks:
            if self._ended:
                return b""
            self._readable.clear()
            await self._readable.wait()
        data = self._chunks.popleft()
        self._mux.consumed(self, len(data))
        return data

    async def write(self, data: bytes) -> None:
        """Send ``data``, waiting for credit as the peer grants it."""
        while data:
            if self._lost is not None:
                raise ConnectionResetError(self._lost)
            credit = self._mux.state.send_credit_for(self.id)
            if credit == 0:
                self._credit.clear()
                await self._credit.wait()
                continue
            # Slicing all of a bytes object returns it as it is: no copy when it fits.
            part, data = data[:credit], data[credit:]
            self._mux.write_now(self._mux.state.send_data(self.id, part))
            await self._mux.drain()

    def write_eof(self) -> None:
        """Send no more data (the peer's reader sees the end)."""
        if self._lost is None:
            self._mux.write_now(self._mux.state.send_eof(self.id))
            if not self._mux.state.is_open(self.id):
                self._mux.forget(self)  # both ways done

    def reset(self, reason: str) -> None:
        """End the stream both ways at once."""
        if self._lost is None:
            self._mux.write_now(self._mux.state.send_reset(self.id, reason))
        self._end(reason)

    @property
    def lost(self) -> str | None:
        """Why the stream ended abruptly (reset, link gone), or ``None``."""
        return self._lost

    # the mux's side ----------------------------------------------------------------

    def _received(self, data: bytes) -> None:
        if self._sink is not None:
            self._sink.received(data)
            return
        self._chunks.append(data)
        self._readable.set()

    def _eof(self) -> None:
        self._ended = True
        if self._sink is not None:
            self._sink.eof()
            return
        self._readable.set()

    def _end(self, reason: str) -> None:
        if self._lost is None:
            self._lost = reason
        self._mux.release(self, self.held)  # the sink drops what it holds (ended)
        self._mux.queued(self, -self.unsent)
        self._ended = True
        self._readable.set()
        self._credit.set()
        self._mux.forget(self)
        if not self.answer.done():
            self.answer.set_result(reason)
        if self._sink is not None:
            self._sink.ended(self._lost)

    def _wake_writer(self) -> None:
        if self._sink is not None:
            self._sink.credited()
        elif self._mux.state.send_credit_for(self.id) > 0:
            self._credit.set()


class Mux:
    """Both sides' runner of one link. ``on_apps`` (the laptop) gets each APPS list;
    ``on_open`` (the far side) gets each stream the laptop opens, already registered,
    and must answer it with :meth:`opened` or :meth:`refuse`."""

    def __init__(
        self,
        link: Link,
        role: wire.Role,
        on_apps: Callable[[wire.AppsListed], None] | None = None,
        on_open: Callable[[MuxStream, wire.OpenStream | wire.OpenControl], None] | None = None,
        held_budget: int = LINK_HELD_BUDGET,
    ) -> None:
        self.link = link
        self.held_budget = held_budget
        # Bytes held for its streams: received and not taken by their readers, or given
        # to be sent and kept for want of credit; LINK_HELD_BUDGET bounds their sum.
        self.held = 0
        # Streams ended both ways whose reader has bytes left to take (see forget).
        self._unread_ended: dict[int, MuxStream] = {}
        self._budget_said = False
        self.state = wire.LinkState(role)
        self._on_apps = on_apps
        self._on_open = on_open
        self._streams: dict[int, MuxStream] = {}
        self._pending: list[wire.Event] = []
        self._closed: str | None = None
        # Frames written this turn of the event loop, sent as one write at its end.
        self._outgoing: list[bytes] = []
        self._queued = 0  # their bytes
        self._loop = asyncio.get_running_loop()
        # While the link's buffer is over LINK_BACKLOG_BYTES: the task waiting for it to
        # drain, and the stream transports to tell once it has.
        self._draining: asyncio.Task[None] | None = None
        self._waiting_for_room: dict[int, Callable[[], None]] = {}
        # A link that cannot say how full its buffer is counts as full: it is drained
        # after every write, as each stream's write used to wait for.
        self._backlog = link.backlog or (lambda: LINK_BACKLOG_BYTES + 1)

    @property
    def closed(self) -> str | None:
        """Why the link ended, once it has."""
        return self._closed

    def write_now(self, frames: bytes) -> None:
        """Queue ``frames`` for the link. Everything queued in one turn of the event loop
        (the frames of many streams at c=64) goes out as one write at its end: one SSH
        packet and one system call instead of one per frame, and no added wait. The queue
        holds at most what the streams' credit allows; a writer's :meth:`drain` still
        waits on the transport's own buffer, and a stream transport stops queueing once
        the turn's frames and that buffer pass :data:`LINK_BACKLOG_BYTES`."""
        if frames and self._closed is None:
            if not self._outgoing:
                self._loop.call_soon(self._flush)
            self._outgoing.append(frames)
            self._queued += len(frames)

    def _flush(self) -> None:
        frames, self._outgoing = self._outgoing, []
        self._queued = 0
        if frames and self._closed is None:
            try:
                self.link.writer.write(frames[0] if len(frames) == 1 else b"".join(frames))
            except (ConnectionError, OSError, RuntimeError) as exc:
                self._lose(f"writing to the link failed: {exc}")
                return
        if self._draining is None and self._closed is None:
            if self._backlog() > LINK_BACKLOG_BYTES:
                self._draining = self._loop.create_task(self._wait_for_room())
            elif self._waiting_for_room:
                self._give_room()

    @property
    def congested(self) -> bool:
        """Whether the link's send buffer, with what this turn queued, is over
        :data:`LINK_BACKLOG_BYTES`: a stream transport then keeps what it would send
        until there is room again (:meth:`when_room`)."""
        return self._draining is not None or self._queued > LINK_BACKLOG_BYTES

    def when_room(self, stream: int, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the link is no longer :attr:`congested`."""
        self._waiting_for_room[stream] = callback

    async def _wait_for_room(self) -> None:
        try:
            await self.link.writer.drain()
        except (ConnectionError, OSError, RuntimeError) as exc:
            self._lose(f"writing to the link failed: {exc}")
        finally:
            self._draining = None
        self._give_room()

    def _give_room(self) -> None:
        waiting, self._waiting_for_room = self._waiting_for_room, {}
        while waiting and not self.congested and self._closed is None:
            callback = waiting.pop(next(iter(waiting)))  # the first to wait, first
            callback()
        waiting.update(self._waiting_for_room)  # congested again: the rest wait on
        self._waiting_for_room = waiting

    async def drain(self) -> None:
        if self._closed is not None:
            raise ConnectionResetError(self._closed)
        try:
            await self.link.writer.drain()
        except (ConnectionError, OSError, RuntimeError) as exc:
            self._lose(f"writing to the link failed: {exc}")
            raise ConnectionResetError(self._closed) from None

    async def handshake(self) -> None:
        """Send HELLO and wait for the peer's; raise RemoteLinkError if it does not come."""
        self.write_now(self.state.send_hello())
        try:
            async with asyncio.timeout(HELLO_TIMEOUT):
                while not self._pending:
                    data = await self.link.reader.read(LINK_READ_BYTES)
                    if not data:
                        raise RemoteLinkError(
                            f"{self.link.description} ended before saying HELLO "
                            "(is sandbridge serve-stdio at the far end?)"
                        )
                    self._pending = self.state.receive(data)
        except TimeoutError:
            raise RemoteLinkError(
                f"{self.link.description} did not say HELLO within {HELLO_TIMEOUT:g} s"
            ) from None
        except RemoteWireError as exc:
            raise RemoteLinkError(f"{self.link.description}: {exc}") from None
        self._pending.pop(0)  # the HELLO

    async def run(self) -> str:
        """Read the link until it ends; return why it ended. Every stream ends with it."""
        try:
            self._dispatch(self._pending)
            self._pending = []
            while self._closed is None:
                data = await self.link.reader.read(LINK_READ_BYTES)
                if not data:
                    self._lose("the far end closed the link")
                    break
                self._dispatch(self.state.receive(data))
        except RemoteWireError as exc:
            self.fail(exc)
        except (ConnectionError, OSError) as exc:
            self._lose(f"reading the link failed: {exc}")
        finally:
            self._lose("the link was closed")
        assert self._closed is not None
        return self._closed

    def fail(self, error: RemoteWireError) -> None:
        """End the link for a protocol error: one found as it is read, or later (an APPS
        list parsed when it is applied). :meth:`run` returns the reason once it is
        cancelled or reads again."""
        log.warning("remote.protocol_error", link=self.link.description, error=str(error))
        self._lose(f"protocol error: {error}")

    async def open(self, session: str, port: int) -> MuxStream:
        """Open a stream to ``session``'s app on ``port`` (the laptop's side); raise
        ConnectionRefusedError with the far side's reason if it refuses."""
        if self._closed is not None:
            raise ConnectionResetError(self._closed)
        return await self._open(*self.state.send_open(session, port))

    async def open_control(self, session: str) -> MuxStream:
        """Open a stream to ``session``'s terminal control socket (the laptop's side);
        raise ConnectionRefusedError with the far side's reason if it refuses."""
        if self._closed is not None:
            raise ConnectionResetError(self._closed)
        return await self._open(*self.state.send_open_control(session))

    async def _open(self, stream_id: int, frames: bytes) -> MuxStream:
        stream = self._streams[stream_id] = MuxStream(self, stream_id)
        self.write_now(frames)
        try:
            async with asyncio.timeout(STREAM_OPEN_TIMEOUT):
                refusal = await stream.answer
        except TimeoutError:
            stream.reset("not opened in time")
            raise ConnectionResetError(
                f"the far side did not open the stream within {STREAM_OPEN_TIMEOUT:g} s"
            ) from None
        except BaseException:
            stream.reset("cancelled")
            raise
        if refusal is not None:
            raise ConnectionRefusedError(refusal)
        return stream

    def opened(self, stream: MuxStream) -> None:
        """The far side's answer: the stream is open."""
        if stream.lost is None:
            self.write_now(self.state.send_opened(stream.id))

    def refuse(self, stream: MuxStream, reason: str) -> None:
        """The far side's answer: the stream is not opened."""
        if stream.lost is None:
            self.write_now(self.state.send_refused(stream.id, reason))
        stream._end(reason)

    def send_apps(self, apps: tuple[wire.FarApp, ...], described: wire.Described = ()) -> None:
        self.write_now(self.state.send_apps(apps, described))

    def consumed(self, stream: MuxStream, count: int) -> None:
        """``stream``'s reader took ``count`` bytes: they are no longer held here, and
        the peer gets its credit back as the link's state says."""
        self.release(stream, count)
        self.write_now(self.state.consumed(stream.id, count))

    def release(self, stream: MuxStream, count: int) -> None:
        """``count`` received bytes of ``stream`` are no longer held (taken, dropped)."""
        count = min(count, stream.held)
        stream.held -= count
        self.held -= count
        if not stream.held and self._unread_ended.get(stream.id) is stream:
            del self._unread_ended[stream.id]

    def queued(self, stream: MuxStream, change: int) -> None:
        """``stream``'s transport keeps ``change`` bytes more (fewer, if negative) to
        send once the peer credits them; call :meth:`check_budget` after a rise."""
        change = max(change, -stream.unsent)
        stream.unsent += change
        self.held += change

    def check_budget(self) -> None:
        """Reset the streams holding the most until the link is within its budget."""
        while self.held > self.held_budget:
            victim = max(
                (*self._streams.values(), *self._unread_ended.values()),
                key=lambda s: s.held + s.unsent,
                default=None,
            )
            if victim is None or victim.held + victim.unsent == 0:
                return
            # Said once per link (then at debug level): each reset is a stream the
            # peer filled, and a hostile peer must not flood the owner's terminal.
            said = log.debug if self._budget_said else log.warning
            self._budget_said = True
            said(
                "remote.held_budget",
                link=self.link.description,
                stream=victim.id,
                held=victim.held,
                unsent=victim.unsent,
                budget=self.held_budget,
            )
            reason = (
                f"over the link's budget of {self.held_budget} bytes held: this stream held "
                f"{victim.held} its reader had not taken and {victim.unsent} not credited"
            )
            if self._unread_ended.get(victim.id) is victim:
                victim._end(reason)  # closed both ways already: its unread bytes go
            else:
                victim.reset(reason)

    def forget(self, stream: MuxStream) -> None:
        """``stream`` ended both ways: no more events for it. What its reader has not
        taken yet still counts toward the budget (and may be reset for it) until taken:
        a peer that sends a window and its end on streams nobody reads holds no more."""
        if self._streams.get(stream.id) is stream:
            del self._streams[stream.id]
        if stream.held:
            self._unread_ended[stream.id] = stream
        elif self._unread_ended.get(stream.id) is stream:
            del self._unread_ended[stream.id]

    def _dispatch(self, events: list[wire.Event]) -> None:  # noqa: PLR0912  (one branch per event)
        for event in events:
            if isinstance(event, wire.AppsListed):
                if self._on_apps is not None:
                    self._on_apps(event)
                continue
            if isinstance(event, wire.OpenStream | wire.OpenControl):
                stream = self._streams[event.stream] = MuxStream(self, event.stream)
                if self._on_open is None:
                    self.refuse(stream, "this side opens no streams")
                else:
                    self._on_open(stream, event)
                continue
            if isinstance(event, wire.Hello):
                continue
            stream_or_none = self._streams.get(event.stream)
            if stream_or_none is None:
                continue
            if isinstance(event, wire.Opened):
                stream_or_none.answer.set_result(None)
            elif isinstance(event, wire.Refused | wire.Reset):
                stream_or_none._end(event.reason)
            elif isinstance(event, wire.Data):
                stream_or_none.held += len(event.data)
                self.held += len(event.data)
                stream_or_none._received(event.data)
                if self.held > self.held_budget:
                    self.check_budget()
            elif isinstance(event, wire.Credited):
                stream_or_none._wake_writer()
            elif isinstance(event, wire.EndOfStream):
                stream_or_none._eof()
                if not self.state.is_open(event.stream):
                    self.forget(stream_or_none)

    def _lose(self, reason: str) -> None:
        if self._closed is None:
            self._closed = reason
        for stream in list(self._streams.values()):
            stream.link_lost = True
            stream._end(self._closed)
        self._streams.clear()
        self._unread_ended.clear()
        self._waiting_for_room.clear()
        draining, self._draining = self._draining, None
        if draining is not None and draining is not asyncio.current_task():
            draining.cancel()
