"""A link stream as an asyncio transport (remote/stream_transport.py), over a real socket
pair with both muxes in this process: bytes both ways, the link's credit and the
protocol's pause as backpressure, half closes, close, reset and the link's end."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from sandbridge.protocol import remote_wire as wire
from sandbridge.protocol.remote_wire import STREAM_WINDOW, OpenStream, Role
from sandbridge.remote.mux import LINK_BACKLOG_BYTES, Mux, MuxStream
from sandbridge.remote.stream_transport import WRITE_HIGH_WATER, StreamTransport
from tests.remote.test_mux import link_over


class Recorder(asyncio.Protocol):
    """A protocol that keeps what happens to it, and wakes a waiter on each event."""

    def __init__(self) -> None:
        self.transport: StreamTransport | None = None
        self.data = bytearray()
        self.eof = False
        self.lost: list[Exception | None] = []
        self.pauses = 0
        self.resumes = 0
        self.keep_open_at_eof = True
        self._changed = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, StreamTransport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data
        self._changed.set()

    def eof_received(self) -> bool:
        self.eof = True
        self._changed.set()
        return self.keep_open_at_eof

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.append(exc)
        self._changed.set()

    def pause_writing(self) -> None:
        self.pauses += 1

    def resume_writing(self) -> None:
        self.resumes += 1
        self._changed.set()

    async def until(self, condition: object) -> None:
        async with asyncio.timeout(10):
            while not condition():  # type: ignore[operator]
                self._changed.clear()
                await self._changed.wait()


@asynccontextmanager
async def pair() -> AsyncIterator[tuple[Recorder, Recorder, Mux, Mux]]:
    """A stream opened by the laptop, each end a StreamTransport with a Recorder."""
    far_ends: list[Recorder] = []

    def on_open(stream: MuxStream, event: OpenStream | wire.OpenControl) -> None:
        far_ends.append(Recorder())
        StreamTransport(stream._mux, stream, far_ends[-1])
        stream._mux.opened(stream)

    a, b = socket.socketpair()
    laptop_link, far_link = await link_over(a), await link_over(b)
    laptop = Mux(laptop_link, Role.LAPTOP)
    far = Mux(far_link, Role.FAR, on_open=on_open)
    await asyncio.gather(laptop.handshake(), far.handshake())
    tasks = [asyncio.create_task(laptop.run()), asyncio.create_task(far.run())]
    try:
        near = Recorder()
        StreamTransport(laptop, await laptop.open("web", 80), near)
        yield near, far_ends[0], laptop, far
    finally:
        await laptop_link.close()
        await far_link.close()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _until(condition: Callable[[], bool]) -> None:
    """Wait until ``condition`` holds (it depends on socket I/O of this loop)."""
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.005)


def _transport(recorder: Recorder) -> StreamTransport:
    assert recorder.transport is not None
    return recorder.transport


def test_bytes_cross_both_ways_beyond_a_window_with_the_writer_paused_meanwhile() -> None:
    async def check() -> None:
        async with pair() as (near, far_end, _, _):
            payload = bytes(range(256)) * (3 * STREAM_WINDOW // 256)
            _transport(near).write(payload)
            _transport(far_end).write(b"answer")
            # Beyond the credit the bytes wait in the transport, and its protocol is
            # told to pause until they are out.
            assert _transport(near).get_write_buffer_size() > WRITE_HIGH_WATER
            assert near.pauses == 1
            await far_end.until(lambda: len(far_end.data) == len(payload))
            await near.until(lambda: near.data == b"answer" and near.resumes == 1)
            assert bytes(far_end.data) == payload
            assert _transport(near).get_write_buffer_size() == 0

    asyncio.run(check())


def test_a_protocol_that_paused_reading_holds_its_peer_to_one_window() -> None:
    async def check() -> None:
        async with pair() as (near, far_end, laptop, far):
            _transport(far_end).pause_reading()
            payload = b"x" * (3 * STREAM_WINDOW)
            _transport(near).write(payload)
            # The laptop may send one window and no more: nothing was credited back,
            # and the far end holds that window, given to nobody.
            held = _transport(far_end)._held
            await _until(lambda: sum(map(len, held)) >= STREAM_WINDOW)
            assert laptop.state.send_credit_for(_transport(near)._id) == 0
            assert sum(map(len, held)) == STREAM_WINDOW
            assert far_end.data == b""
            assert _transport(near).get_write_buffer_size() == len(payload) - STREAM_WINDOW
            _transport(far_end).resume_reading()
            await far_end.until(lambda: len(far_end.data) == len(payload))
            assert far.state.open_streams == 1

    asyncio.run(check())


def test_a_half_close_crosses_and_the_other_way_goes_on() -> None:
    async def check() -> None:
        async with pair() as (near, far_end, _, _):
            _transport(near).write(b"request")
            _transport(near).write_eof()
            await far_end.until(lambda: far_end.eof)
            assert far_end.data == b"request"
            _transport(far_end).write(b"response")
            _transport(far_end).close()
            await near.until(lambda: near.eof)
            assert near.data == b"response"
            await far_end.until(lambda: far_end.lost == [None])

    asyncio.run(check())


def test_data_after_close_is_answered_with_a_reset() -> None:
    async def check() -> None:
        async with pair() as (near, far_end, laptop, _):
            _transport(near).close()
            await near.until(lambda: near.lost == [None])
            await far_end.until(lambda: far_end.eof)
            _transport(far_end).write(b"too late")
            await far_end.until(lambda: far_end.lost)
            assert isinstance(far_end.lost[0], ConnectionResetError)
            assert "the connection was closed" in str(far_end.lost[0])
            assert laptop.state.open_streams == 0

    asyncio.run(check())


def test_abort_resets_the_peer_and_loses_the_connection_quietly() -> None:
    async def check() -> None:
        async with pair() as (near, far_end, _, far):
            _transport(near).abort()
            await near.until(lambda: near.lost == [None])
            await far_end.until(lambda: far_end.lost)
            assert "aborted" in str(far_end.lost[0])
            assert far.state.open_streams == 0

    asyncio.run(check())


def test_the_link_ending_loses_the_connection_with_its_reason() -> None:
    async def check() -> None:
        async with pair() as (near, _, _, far):
            await far.link.close()
            await near.until(lambda: near.lost)
            assert isinstance(near.lost[0], ConnectionResetError)
            assert _transport(near).is_closing()

    asyncio.run(check())


def test_a_link_that_does_not_drain_stops_the_streams_sending() -> None:
    """The far end reads nothing after the streams opened: the laptop's link buffer stops
    near LINK_BACKLOG_BYTES, however much credit four streams have; the rest waits in
    the stream transports, whose protocols are paused."""

    async def check() -> None:
        a, b = socket.socketpair()
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        link = await link_over(a)
        far = wire.LinkState(Role.FAR)
        b.sendall(far.send_hello())
        laptop = Mux(link, Role.LAPTOP)
        handshake = asyncio.create_task(laptop.handshake())
        b.setblocking(False)
        loop = asyncio.get_running_loop()
        events: list[wire.Event] = []
        while len([e for e in events if isinstance(e, wire.Hello)]) < 1:
            events += far.receive(await loop.sock_recv(b, 65536))
        await handshake
        running = asyncio.create_task(laptop.run())
        try:
            opening = [asyncio.create_task(laptop.open("web", 80 + i)) for i in range(4)]
            while len([e for e in events if isinstance(e, OpenStream)]) < 4:
                events += far.receive(await loop.sock_recv(b, 65536))
            for event in events:
                if isinstance(event, OpenStream):
                    await loop.sock_sendall(b, far.send_opened(event.stream))
            streams = [await task for task in opening]
            ends = [Recorder() for _ in streams]
            for stream, end in zip(streams, ends, strict=True):
                StreamTransport(laptop, stream, end)
                _transport(end).write(b"y" * STREAM_WINDOW)
            await _until(lambda: laptop.congested)
            for _ in range(20):  # turns of the loop in which a stream could send more
                await asyncio.sleep(0)
            backlog = link.writer.transport.get_write_buffer_size()  # type: ignore[attr-defined]
            # Past the limit by at most the one write that crossed it.
            assert backlog < LINK_BACKLOG_BYTES + STREAM_WINDOW + 4096
            unsent = sum(_transport(end).get_write_buffer_size() for end in ends)
            assert unsent > 2 * STREAM_WINDOW
            assert sum(end.pauses for end in ends) >= 2
        finally:
            await link.close()
            b.close()
            await asyncio.gather(running, return_exceptions=True)

    asyncio.run(check())


def test_a_stream_already_ended_when_attached_is_lost_at_once() -> None:
    async def check() -> None:
        async with pair() as (_, _, laptop, _):
            stream = MuxStream(laptop, 99)
            stream._end("gone")
            late = Recorder()
            StreamTransport(laptop, stream, late)
            await late.until(lambda: late.lost)
            assert str(late.lost[0]) == "gone"

    asyncio.run(check())


def test_bytes_kept_for_want_of_credit_count_toward_the_links_budget() -> None:
    """A peer that credits nothing back: what each stream's protocol writes beyond its
    credit is kept on this side (up to the pause and the protocol's last write, per
    stream, on up to 1,024 streams). That counts toward the link's budget too, and past
    it the stream keeping the most is reset; the link goes on."""
    budget = 8 * 1024 * 1024
    streams = 12
    far_ends: list[Recorder] = []

    def on_open(stream: MuxStream, event: OpenStream | wire.OpenControl) -> None:
        far_ends.append(Recorder())
        StreamTransport(stream._mux, stream, far_ends[-1])
        _transport(far_ends[-1]).pause_reading()  # takes nothing: credits nothing
        stream._mux.opened(stream)

    async def check() -> None:
        a, b = socket.socketpair()
        laptop_link, far_link = await link_over(a), await link_over(b)
        laptop = Mux(laptop_link, Role.LAPTOP, held_budget=budget)
        far = Mux(far_link, Role.FAR, on_open=on_open, held_budget=2**40)
        await asyncio.gather(laptop.handshake(), far.handshake())
        tasks = [asyncio.create_task(laptop.run()), asyncio.create_task(far.run())]
        try:
            near: list[Recorder] = []
            for _ in range(streams):
                near.append(Recorder())
                StreamTransport(laptop, await laptop.open("web", 80), near[-1])
                _transport(near[-1]).write(b"x" * (STREAM_WINDOW + 1024 * 1024))
                assert laptop.held <= budget
            reset = [r for r in near if _transport(r).is_closing()]
            assert len(reset) >= streams - budget // (1024 * 1024)
            for lost in reset:
                await lost.until(lambda lost=lost: lost.lost)
                assert "budget" in str(lost.lost[0])
            kept = [_transport(r) for r in near if r not in reset]
            assert laptop.held == sum(t.get_write_buffer_size() for t in kept)
            assert laptop.closed is None
        finally:
            await laptop_link.close()
            await far_link.close()
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(check())
