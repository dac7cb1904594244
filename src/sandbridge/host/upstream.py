"""Connections from the host to the shim's ``upstream.sock``.

The socket lives in the runtime dir, which the sandbox can write: it could replace
``upstream.sock`` with a symlink to a host socket, a FIFO or a file. So the host opens
the path with ``O_PATH | O_NOFOLLOW``, checks that what it got is a socket owned by this
user, and connects through ``/proc/self/fd/N``: the inode it checked is the one it
connects to, with no window for a swap in between.
"""

from __future__ import annotations

import asyncio
import enum
import os
import socket
import stat
from pathlib import Path

from sandbridge import log
from sandbridge.exceptions import UpstreamError, WireError
from sandbridge.host.channel import Channel
from sandbridge.wire import stream
from sandbridge.wire.jsonline import LineReader
from sandbridge.wire.limits import MAX_STREAM_OPEN_BYTES, STREAM_OPEN_TIMEOUT

# Socket buffer for the Unix hop: large enough that one write moves a 256 KiB read.
UNIX_BUFFER_BYTES = 256 * 1024


class Protocol(enum.Enum):
    """Which forwarding protocol the session's shim speaks."""

    AUTO = "auto"
    STREAM = "stream"
    V1 = "v1"


def connect_unix_checked(path: Path) -> socket.socket:
    """Connect to the Unix socket at ``path`` without following a symlink there."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UpstreamError(f"{path} does not exist: is the shim running?") from None
    except OSError as exc:
        raise UpstreamError(f"cannot open {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISLNK(info.st_mode):
            raise UpstreamError(f"{path} is a symlink; refusing to follow it")
        if not stat.S_ISSOCK(info.st_mode):
            raise UpstreamError(f"{path} is not a socket; refusing to use it")
        if info.st_uid != os.getuid():
            raise UpstreamError(f"{path} is owned by uid {info.st_uid}; refusing to use it")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, UNIX_BUFFER_BYTES)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UNIX_BUFFER_BYTES)
            sock.connect(f"/proc/self/fd/{fd}")
        except OSError as exc:
            sock.close()
            raise UpstreamError(f"cannot connect to {path}: {exc.strerror}") from None
        sock.setblocking(False)
        return sock
    finally:
        os.close(fd)


class StreamRefused(UpstreamError):
    """The shim speaks stream mode but could not open this stream (app not listening)."""


async def open_stream(socket_path: Path, port: int) -> tuple[Channel, bytes]:
    """Open a stream-mode connection to the app at sandbox ``port``.

    Returns the connection and any bytes the shim sent after its answer. Raises
    :class:`stream.NotStreamCapable` for a v1-only shim.
    """
    sock = connect_unix_checked(socket_path)
    loop = asyncio.get_running_loop()
    _, channel = await loop.create_unix_connection(lambda: Channel(UNIX_BUFFER_BYTES), sock=sock)
    try:
        channel.write(stream.encode_open(port))
        lines = LineReader(MAX_STREAM_OPEN_BYTES)
        line = None
        async with asyncio.timeout(STREAM_OPEN_TIMEOUT):
            while line is None:
                data = await channel.read()
                line = lines.feed(data) if data else lines.feed_eof()
        ack = stream.decode_ack(line)
    except stream.NotStreamCapable:
        channel.close()
        raise
    except (OSError, WireError, TimeoutError) as exc:
        channel.close()
        raise UpstreamError(f"shim did not open a stream: {exc or 'timed out'}") from None
    if not ack.ok:
        channel.close()
        raise StreamRefused(f"shim could not reach sandbox port {port}: {ack.error}")
    return channel, lines.rest


class UpstreamConnector:
    """Opens upstream connections for a session, remembering which protocol works."""

    def __init__(self, socket_path: Path, protocol: Protocol = Protocol.AUTO) -> None:
        self.socket_path = socket_path
        self.protocol = protocol

    async def open(self, port: int) -> tuple[Channel, bytes] | None:
        """Open a stream to ``port``; ``None`` means: use v1 for this session."""
        if self.protocol is Protocol.V1:
            return None
        try:
            return await open_stream(self.socket_path, port)
        except stream.NotStreamCapable:
            if self.protocol is Protocol.STREAM:
                raise UpstreamError("shim does not speak stream mode") from None
            log.info("upstream.v1_fallback", socket=str(self.socket_path))
            self.protocol = Protocol.V1
            return None
