"""The link's asyncio side (remote/mux.py) over a real socket pair, both ends in this
process: streams, credit, and what the link's end does to them."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from sandbridge.exceptions import RemoteLinkError
from sandbridge.protocol.remote_wire import (
    STREAM_WINDOW,
    Apps,
    AppsListed,
    FarApp,
    OpenControl,
    OpenStream,
    Role,
    parse_apps,
)
from sandbridge.remote.mux import LINK_HELD_BUDGET, Mux, MuxStream
from sandbridge.remote.transport import Link, LinkWriter


async def link_over(sock: socket.socket) -> Link:
    """A link over one end of a socket pair (the mux and stream transport tests')."""
    reader, writer = await asyncio.open_unix_connection(sock=sock)

    async def close() -> None:
        writer.close()

    return Link(reader, writer, close, "test link", writer.transport.get_write_buffer_size)


@asynccontextmanager
async def linked(
    on_open: object = None,
) -> AsyncIterator[tuple[Mux, Mux, list[AppsListed]]]:
    """A laptop and a far mux, handshaken and running."""
    a, b = socket.socketpair()
    laptop_link, far_link = await link_over(a), await link_over(b)
    listed: list[AppsListed] = []
    laptop = Mux(laptop_link, Role.LAPTOP, on_apps=listed.append)
    far = Mux(far_link, Role.FAR, on_open=on_open)  # type: ignore[arg-type]
    await asyncio.gather(laptop.handshake(), far.handshake())
    tasks = [asyncio.create_task(laptop.run()), asyncio.create_task(far.run())]
    try:
        yield laptop, far, listed
    finally:
        await laptop_link.close()
        await far_link.close()
        await asyncio.gather(*tasks, return_exceptions=True)


def test_apps_list_reaches_the_laptop() -> None:
    async def check() -> None:
        async with linked() as (laptop, far, listed):
            far.send_apps((FarApp("web", 80, "/"),))
            # The far side opens nothing here: its refusal comes after the list.
            with pytest.raises(ConnectionRefusedError, match="this side opens no streams"):
                await laptop.open("web", 80)
            assert [parse_apps(each) for each in listed] == [Apps((FarApp("web", 80, "/"),))]

    asyncio.run(check())


def test_a_window_and_more_flows_as_the_reader_reads() -> None:
    accepted: list[MuxStream] = []

    def on_open(stream: MuxStream, event: OpenStream) -> None:
        accepted.append(stream)
        stream._mux.opened(stream)

    async def check() -> None:
        async with linked(on_open) as (laptop, _far, _):
            stream = await laptop.open("web", 80)
            payload = bytes(range(256)) * (3 * STREAM_WINDOW // 256)
            sending = asyncio.create_task(accepted[0].write(payload))
            received = bytearray()
            while len(received) < len(payload):
                received += await stream.read()
            await sending
            assert bytes(received) == payload

    asyncio.run(check())


def test_refused_open_raises_with_the_far_reason() -> None:
    def on_open(stream: MuxStream, event: OpenStream) -> None:
        stream._mux.refuse(stream, f"no app on port {event.port}")

    async def check() -> None:
        async with linked(on_open) as (laptop, _, _):
            with pytest.raises(ConnectionRefusedError, match="no app on port 81"):
                await laptop.open("web", 81)

    asyncio.run(check())


def test_the_link_ending_ends_every_stream() -> None:
    accepted: list[MuxStream] = []

    def on_open(stream: MuxStream, event: OpenStream) -> None:
        accepted.append(stream)
        stream._mux.opened(stream)

    async def check() -> None:
        async with linked(on_open) as (laptop, far, _):
            stream = await laptop.open("web", 80)
            await far.link.close()
            assert await stream.read() == b""
            assert stream.lost is not None
            with pytest.raises(ConnectionResetError):
                await stream.write(b"x" * (STREAM_WINDOW + 1))

    asyncio.run(check())


def test_a_peer_that_says_no_hello_is_refused() -> None:
    async def check() -> None:
        a, b = socket.socketpair()
        b.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
        link = await link_over(a)
        try:
            with pytest.raises(RemoteLinkError, match="test link: unknown frame kind"):
                await Mux(link, Role.LAPTOP).handshake()
        finally:
            await link.close()
            b.close()

    asyncio.run(check())


class _CountingWriter:
    """The link's writer, counting the writes that reach it."""

    def __init__(self, writer: LinkWriter) -> None:
        self._writer = writer
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self._writer.write(data)

    async def drain(self) -> None:
        await self._writer.drain()


def test_frames_of_many_streams_in_one_turn_reach_the_link_as_one_write() -> None:
    accepted: list[MuxStream] = []

    def on_open(stream: MuxStream, event: OpenStream) -> None:
        accepted.append(stream)
        stream._mux.opened(stream)

    async def check() -> None:
        async with linked(on_open) as (laptop, _far, _):
            streams = [await laptop.open("web", port) for port in (80, 81, 82)]
            counting = _CountingWriter(laptop.link.writer)
            laptop.link.writer = counting
            await asyncio.gather(*(s.write(f"to {s.id}".encode()) for s in streams))
            assert [await far_end.read() for far_end in accepted] == [
                f"to {s.id}".encode() for s in streams
            ]
            assert len(counting.writes) == 1

    asyncio.run(check())


def test_unread_streams_together_hold_no_more_than_the_links_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A hostile far side fills every stream the laptop opens with its whole window while
    nothing reads them: 1,024 streams would be 2 GiB waiting on the laptop. Past the
    link's budget the stream holding the most is reset; the rest keep their bytes."""
    streams = LINK_HELD_BUDGET // STREAM_WINDOW + 8
    payload = bytes(range(256)) * (STREAM_WINDOW // 256)
    written: list[asyncio.Task[None]] = []

    def on_open(stream: MuxStream, event: OpenStream) -> None:
        stream._mux.opened(stream)
        written.append(asyncio.create_task(stream.write(payload)))

    async def check() -> None:
        async with linked(on_open) as (laptop, far, _):
            opened = [await laptop.open("web", 80) for _ in range(streams)]
            await asyncio.gather(*written, return_exceptions=True)
            # The link keeps its order: once this list is in, every DATA before it is too.
            arrived = asyncio.Event()
            laptop._on_apps = lambda apps: arrived.set()
            far.send_apps(())
            await arrived.wait()
            assert laptop.held <= LINK_HELD_BUDGET
            reset = [s for s in opened if s.lost is not None]
            assert len(reset) >= streams - LINK_HELD_BUDGET // STREAM_WINDOW
            assert all("budget" in str(s.lost) for s in reset)
            kept = [s for s in opened if s.lost is None]
            assert sum(s.held for s in kept) == laptop.held
            for stream in kept:  # what was kept is whole, and reads as sent
                received = bytearray()
                while len(received) < len(payload):
                    received += await stream.read()
                assert received == payload
            assert laptop.held == 0

    caplog.set_level(logging.DEBUG, logger="sandbridge")
    asyncio.run(check())
    # Said once, however many streams the peer filled: no flood on the owner's terminal.
    said = [r for r in caplog.records if "remote.held_budget" in r.getMessage()]
    assert len(said) >= 8
    assert [r.levelno for r in said].count(logging.WARNING) == 1


def test_streams_ended_both_ways_with_bytes_unread_still_count_toward_the_budget() -> None:
    """A peer that sends a whole window and its end on streams whose reader takes nothing
    (a refused control stream, say): ended both ways, they were forgotten with their
    bytes still counted, beyond every reset, and the link stayed over its budget for good
    (each later DATA frame then reset the live stream that got it)."""
    streams = LINK_HELD_BUDGET // STREAM_WINDOW + 8
    payload = bytes(range(256)) * (STREAM_WINDOW // 256)
    written: list[asyncio.Task[None]] = []

    sizes = [STREAM_WINDOW] * streams + [1000]  # then a live stream, read as it comes

    def on_open(stream: MuxStream, event: OpenStream) -> None:
        stream._mux.opened(stream)
        size = sizes.pop(0)

        async def fill_and_end() -> None:
            await stream.write(payload[:size])
            stream.write_eof()

        written.append(asyncio.create_task(fill_and_end()))

    async def check() -> None:
        async with linked(on_open) as (laptop, far, _):
            opened = []
            for _ in range(streams):
                stream = await laptop.open("web", 80)
                stream.write_eof()  # this side is done; nobody takes what comes
                opened.append(stream)
            await asyncio.gather(*written, return_exceptions=True)
            arrived = asyncio.Event()
            laptop._on_apps = lambda apps: arrived.set()
            far.send_apps(())
            await arrived.wait()
            assert laptop.held <= LINK_HELD_BUDGET
            # A stream whose reader reads: the ended streams' bytes give way, not its own.
            live = await laptop.open("web", 80)
            received = bytearray()
            while chunk := await live.read():
                received += chunk
            assert live.lost is None and received == payload[:1000]
            dropped = [s for s in opened if s.lost is not None]
            assert len(dropped) >= streams - LINK_HELD_BUDGET // STREAM_WINDOW
            assert all("budget" in str(s.lost) for s in dropped)
            kept = [s for s in opened if s.lost is None]
            for stream in kept:  # what was kept reads whole, then its end
                received = bytearray()
                while chunk := await stream.read():
                    received += chunk
                assert received == payload
            assert laptop.held == 0

    asyncio.run(check())


def test_the_far_side_holds_no_more_than_the_links_budget_either() -> None:
    """The same budget on the far side: a hostile laptop filling its streams' windows."""
    streams = LINK_HELD_BUDGET // STREAM_WINDOW + 8
    accepted: list[MuxStream] = []

    def on_open(stream: MuxStream, event: OpenStream | OpenControl) -> None:
        if isinstance(event, OpenControl):
            stream._mux.refuse(stream, "no control here")
            return
        accepted.append(stream)
        stream._mux.opened(stream)

    async def check() -> None:
        async with linked(on_open) as (laptop, far, _):
            opened = [await laptop.open("web", 80) for _ in range(streams)]
            results = await asyncio.gather(
                *(s.write(b"x" * STREAM_WINDOW) for s in opened), return_exceptions=True
            )
            assert not [r for r in results if r is not None]
            # A round trip after the data: the far side has taken every frame before it.
            with pytest.raises(ConnectionRefusedError):
                await laptop.open_control("web")
            assert far.held <= LINK_HELD_BUDGET
            assert sum(s.lost is not None for s in accepted) >= streams - (
                LINK_HELD_BUDGET // STREAM_WINDOW
            )

    asyncio.run(check())
