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

import asyncio
import contextlib

from sandbridge.aio.tasks import first_done, running
from sandbridge.relay.host.channel import Channel
from sandbridge.remote.mux import MuxStream

# After a peer's reset, how long the socket may take to end once given its end.
RESET_DRAIN_SECONDS = 10.0


async def _socket_to_link(channel: Channel, stream: MuxStream, gentle: bool) -> None:
    while data := await channel.read():
        try:
            await stream.write(data)
        except ConnectionResetError:
            if not (gentle and not stream.link_lost):
                raise
            # The peer reset its end, the link lives on: what the socket still says goes
            # nowhere, until it ends (the other direction gave it its end).
            async with asyncio.timeout(RESET_DRAIN_SECONDS):
                while await channel.read():
                    pass
            return
    stream.write_eof()


async def _link_to_socket(stream: MuxStream, channel: Channel, gentle: bool) -> None:
    while data := await stream.read():
        await channel.send(data)
    if stream.lost is not None and not (gentle and not stream.link_lost):
        raise ConnectionResetError(stream.lost)
    transport = channel.transport
    if transport is not None and transport.can_write_eof() and not transport.is_closing():
        transport.write_eof()


async def splice(channel: Channel, stream: MuxStream, *, gentle_reset: bool = False) -> None:
    """Copy both ways until both directions ended, or either side ended abruptly.

    ``gentle_reset``: a reset from the peer (the link still up) ends the socket's side
    as an end of stream, a half close, rather than at once: serve-stdio's terminal
    streams, so that the far broker tells a laptop client that vanished (a half close,
    ``end=client``) from the link lost (a whole close, ``end=link``)."""
    try:
        async with running(
            _socket_to_link(channel, stream, gentle_reset),
            _link_to_socket(stream, channel, gentle_reset),
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
