"""A terminal's control stream spliced to its socket (remote/splice.py), over a real link
(a socket pair, both muxes in this process) and a real Unix socket pair standing for the
far session's broker: what each way of ending the stream does to the broker's socket."""

from __future__ import annotations

import asyncio
import select
import socket

from sandbridge.relay.host.channel import Channel
from sandbridge.remote.mux import MuxStream
from sandbridge.remote.splice import splice
from tests.remote.test_mux import linked

HANGUP = select.POLLHUP | select.POLLERR


async def _spliced(
    gentle: bool, accepted: list[MuxStream]
) -> tuple[socket.socket, asyncio.Task[None]]:
    """The broker's end of a socket pair whose other end is spliced to the far stream."""
    broker, served = socket.socketpair()
    loop = asyncio.get_running_loop()
    _, channel = await loop.create_unix_connection(lambda: Channel(65536), sock=served)
    task = asyncio.create_task(splice(channel, accepted[0], gentle_reset=gentle))
    broker.setblocking(False)
    return broker, task


async def _until_ended(broker: socket.socket) -> int:
    """Poll the broker's socket until the far side's end arrives; its poll events."""
    poller = select.poll()
    poller.register(broker, select.POLLIN | select.POLLRDHUP)
    while True:
        events = poller.poll(0)
        if events and events[0][1] & (select.POLLRDHUP | HANGUP):
            return events[0][1]
        await asyncio.sleep(0)  # a loop turn for the muxes, not a wait for time


def _far_opens(accepted: list[MuxStream]) -> object:
    def on_open(stream: MuxStream, _event: object) -> None:
        accepted.append(stream)
        stream._mux.opened(stream)

    return on_open


def test_a_reset_from_the_laptop_reaches_the_broker_as_a_half_close() -> None:
    """The laptop's client vanished with output unread (its connect resets the stream):
    the broker sees an end of stream and can still write, so it audits the client."""

    async def check() -> None:
        accepted: list[MuxStream] = []
        async with linked(_far_opens(accepted)) as (laptop, _far, _):
            stream = await laptop.open("box", 80)
            broker, task = await _spliced(True, accepted)
            with broker:
                stream.reset("the client's connection was reset")
                events = await _until_ended(broker)
                assert not events & HANGUP, events
                assert broker.recv(100) == b""
                broker.send(b"the terminal's last words go nowhere")
                broker.shutdown(socket.SHUT_WR)
                await asyncio.wait_for(task, 10)

    asyncio.run(check())


def test_the_link_lost_reaches_the_broker_as_a_whole_close() -> None:
    async def check() -> None:
        accepted: list[MuxStream] = []
        async with linked(_far_opens(accepted)) as (laptop, _far, _):
            await laptop.open("box", 80)
            broker, task = await _spliced(True, accepted)
            with broker:
                await laptop.link.close()  # the link goes, both ends see it
                events = await _until_ended(broker)
                assert events & HANGUP, events
                await asyncio.wait_for(task, 10)

    asyncio.run(check())


def test_without_gentle_resets_a_reset_closes_the_socket_at_once() -> None:
    """The laptop's side of a terminal stream: a far reset ends the local client at once."""

    async def check() -> None:
        accepted: list[MuxStream] = []
        async with linked(_far_opens(accepted)) as (laptop, _far, _):
            stream = await laptop.open("box", 80)
            broker, task = await _spliced(False, accepted)
            with broker:
                stream.reset("gone")
                events = await _until_ended(broker)
                assert events & HANGUP, events
                await asyncio.wait_for(task, 10)

    asyncio.run(check())
