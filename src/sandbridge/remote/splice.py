"""Bytes between a socket and a stream on the remote link, copied by tasks: a terminal's
control stream and its socket (``terminal_relay.py``, ``far_terminals.py``). An app
connection's stream is a transport instead (``stream_transport.py``: no task per
direction on the data path).

Each direction is copied by its own task, each write awaited (``drain`` on the socket,
credit on the link), so backpressure reaches the sender on both sides. A half close
crosses as a half close (an HTTP client that shuts its sending side still gets its
response); an abrupt end on either side (a reset, the link lost) ends the other at once.
"""

from __future__ import annotations

import contextlib

from sandbridge.aio.tasks import first_done, running
from sandbridge.relay.channel import Channel
from sandbridge.remote.mux import MuxStream


async def _socket_to_link(channel: Channel, stream: MuxStream) -> None:
    while data := await channel.read():
        await stream.write(data)
    stream.write_eof()


async def _link_to_socket(stream: MuxStream, channel: Channel) -> None:
    while data := await stream.read():
        await channel.send(data)
    if stream.lost is not None:
        raise ConnectionResetError(stream.lost)
    transport = channel.transport
    if transport is not None and transport.can_write_eof() and not transport.is_closing():
        transport.write_eof()


async def splice(channel: Channel, stream: MuxStream) -> None:
    """Copy both ways until both directions ended, or either side ended abruptly."""
    try:
        async with running(
            _socket_to_link(channel, stream), _link_to_socket(stream, channel)
        ) as tasks:
            pending = set(tasks)
            while pending:
                done = await first_done(*pending)
                pending -= done
                if any(task.exception() is not None for task in done):
                    break
            failed = [t for t in tasks if t.done() and t.exception() is not None]
    except BaseException:
        stream.reset("cancelled")
        channel.abort()
        raise
    if failed:
        stream.reset(f"connection ended: {failed[0].exception()}")
        channel.abort()
    else:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            await channel.drain()
        channel.close()
