"""Connections from the host to the shim's ``upstream.sock``.

The socket lives in the runtime dir, which the sandbox can write: it could replace
``upstream.sock`` with a symlink to a host socket, a FIFO or a file. So the host opens
the path with ``O_PATH | O_NOFOLLOW``, checks that what it got is a socket owned by this
user, and connects through ``/proc/self/fd/N``: the inode it checked is the one it
connects to, with no window for a swap in between.

The shim may attach descriptors only to the answer of a stream opening that offered a
handoff: on every other connection the kernel refuses them
(:func:`before_loop.refuse_descriptors`), and a connection that could hold some is
closed through :mod:`sandbridge.aio.untrusted_fds`, never on the event loop.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sandbridge import log
from sandbridge.aio import before_loop, untrusted_fds
from sandbridge.aio.unix_sockets import connect_checked
from sandbridge.exceptions import (
    HandoffRefused,
    NotStreamCapable,
    StreamRefused,
    UpstreamError,
    WireError,
)
from sandbridge.protocol import stream
from sandbridge.protocol.http.parser import ResponseReader
from sandbridge.protocol.limits import STREAM_OPEN_TIMEOUT
from sandbridge.relay.host import handoff as handoff_
from sandbridge.relay.host.channel import Channel
from sandbridge.relay.host.settings import ForwardingMode

if TYPE_CHECKING:  # its type alone: the session makes one
    from sandbridge.relay.host.owned_upstream import PendingOwnedUpstream

# Socket buffer for the Unix hop: large enough that one write moves a 256 KiB read.
UNIX_BUFFER_BYTES = 256 * 1024
# While the shim's accept queue is full (a burst, or a shim that never accepts), the next
# connect is tried after this long, doubling up to the maximum: short enough to add little
# to a burst, long enough not to spin.
FULL_QUEUE_FIRST_DELAY = 0.001
FULL_QUEUE_MAX_DELAY = 0.05


async def connect_unix_checked(path: Path) -> socket.socket:
    """Connect to the shim's socket at ``path`` without following a symlink there
    (:func:`~sandbridge.aio.unix_sockets.connect_checked`), and without blocking the
    event loop on a listener whose queue is full: that is waited for here, a few
    milliseconds at a time, for at most ``STREAM_OPEN_TIMEOUT``."""
    sock = socket.socket(
        socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
    )
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, UNIX_BUFFER_BYTES)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UNIX_BUFFER_BYTES)
        before_loop.refuse_descriptors(sock)
        deadline = asyncio.get_running_loop().time() + STREAM_OPEN_TIMEOUT
        delay = FULL_QUEUE_FIRST_DELAY
        while True:
            try:
                connect_checked(sock, path, UpstreamError, "the shim")
                return sock
            except BlockingIOError:
                if asyncio.get_running_loop().time() + delay > deadline:
                    raise UpstreamError(
                        f"{path} accepted no connection for {STREAM_OPEN_TIMEOUT:g} s "
                        "(its queue is full)"
                    ) from None
            # The kernel has no readiness event for room in a listener's queue: look again.
            await asyncio.sleep(delay)
            delay = min(delay * 2, FULL_QUEUE_MAX_DELAY)
    except BaseException:
        sock.close()
        raise


async def open_stream(socket_path: Path, port: int, handoff: bool = True) -> tuple[Channel, bytes]:
    """Open a stream-mode connection to the app at sandbox ``port``.

    Returns the connection and any bytes the shim sent after its answer. With
    ``handoff`` the shim may answer with the app's own socket (:mod:`.handoff`), and the
    connection returned is that socket. Raises :class:`NotStreamCapable` for a
    v1-only shim.
    """
    sock = await connect_unix_checked(socket_path)
    if handoff:
        # Descriptors may come with the answer, and with anything the shim sent after it:
        # from here on ``sock`` is released, never closed on the loop.
        untrusted_fds.accept_descriptors(sock, True)
    fds: list[int] = []
    try:
        # The opening is one small write to an empty socket buffer: it cannot block.
        sock.send(stream.encode_open(port, handoff=handoff))
        async with asyncio.timeout(STREAM_OPEN_TIMEOUT):
            line, rest, truncated = await handoff_.read_answer(sock, fds)
        ack = stream.decode_ack(line)
        if ack.ok and ack.handoff and handoff:
            if rest:
                raise HandoffRefused("shim sent bytes after handing over a socket")
            app = handoff_.adopt_app_socket(fds, truncated, port)
        elif fds or truncated:
            raise HandoffRefused("shim sent descriptors without handing over a socket")
    except NotStreamCapable:
        handoff_.close_all(fds)
        untrusted_fds.release_socket(sock)
        raise
    except HandoffRefused as exc:
        handoff_.close_all(fds)
        untrusted_fds.release_socket(sock)
        log.warning("upstream.handoff_refused", app_port=port, reason=str(exc))
        raise
    except (OSError, WireError, TimeoutError) as exc:
        handoff_.close_all(fds)
        untrusted_fds.release_socket(sock)
        raise UpstreamError(f"shim did not open a stream: {exc or 'timed out'}") from None
    except BaseException:  # cancelled: nothing received may stay open
        handoff_.close_all(fds)
        untrusted_fds.release_socket(sock)
        raise
    if not ack.ok:
        untrusted_fds.release_socket(sock)
        raise StreamRefused(f"shim could not reach sandbox port {port}: {ack.error}")
    loop = asyncio.get_running_loop()
    if ack.handoff and handoff:
        untrusted_fds.release_socket(sock)  # the shim's part is over
        return await _connect(loop, app), b""
    before_loop.refuse_descriptors(sock)
    if not handoff:
        _, channel = await loop.create_unix_connection(
            lambda: Channel(UNIX_BUFFER_BYTES), sock=sock
        )
        return channel, rest
    return await _connect(loop, sock), rest


async def _connect(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> Channel:
    """A channel on a duplicate of ``sock``, whose own descriptor is released once the
    channel's transport is gone: the transport's close is never the last reference."""
    duplicate = untrusted_fds.for_transport(sock)
    try:
        _, channel = await loop.create_connection(
            lambda: Channel(UNIX_BUFFER_BYTES), sock=duplicate
        )
    except BaseException:
        duplicate.close()  # not the last reference: ``sock`` holds one
        untrusted_fds.release_socket(sock)
        raise
    untrusted_fds.keep_until(sock, channel.closed)
    return channel


class UpstreamConnector:
    """Opens upstream connections for a session, remembering which protocol works.

    With ``owned`` (a sandbox sandbridge runs itself) a stream is a connection the host
    makes from a socket in the sandbox's network namespace (:mod:`.owned_upstream`), and
    the shim is not asked; without it, or when that cannot start, the shim hands over
    the app's socket."""

    def __init__(
        self,
        socket_path: Path,
        protocol: ForwardingMode = ForwardingMode.AUTO,
        owned: PendingOwnedUpstream | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.protocol = protocol
        self.owned = owned

    async def open(self, port: int) -> tuple[Channel, bytes] | None:
        """Open a stream to ``port``; ``None`` means: use v1 for this session."""
        if self.protocol is ForwardingMode.V1:
            return None
        if self.owned is not None and (owned := await self.owned.get()) is not None:
            return await owned.open(port), b""
        try:
            return await open_stream(self.socket_path, port)
        except NotStreamCapable:
            if self.protocol is ForwardingMode.STREAM:
                raise UpstreamError("shim does not speak stream mode") from None
            log.info("upstream.v1_fallback", socket=str(self.socket_path))
            self.protocol = ForwardingMode.V1
            return None


@dataclass
class UpstreamConnection:
    """One open upstream connection as a browser connection holds it between exchanges."""

    channel: Channel
    pending: bytes = b""  # what the shim sent after its answer: the response's first bytes
    reader: ResponseReader | None = None  # kept from one response to the next
    reusable: bool = True
    awaiting: bool = False  # a request went out and its response is not read to the end

    def expect_response(self, request_method: bytes) -> ResponseReader:
        """The reader, ready for the response to a request just sent."""
        self.awaiting = True
        if self.reader is None:
            self.reader = ResponseReader(request_method)
        else:
            self.reader.next_response(request_method)
        return self.reader

    def ready_for_exchange(self) -> bool:
        """Whether a next request may go out on it: the app kept it, and it has nothing
        unread, no end of stream and room to write (:meth:`Channel.ready_for_exchange`)."""
        return self.reusable and self.channel.ready_for_exchange()

    def answered(self, reuse: bool) -> None:
        """The response is read to its end; ``reuse``: a next request may follow it."""
        self.awaiting = False
        self.reusable = self.reusable and reuse

    def parkable(self) -> bool:
        """Whether another browser connection may take it over: between exchanges (no
        request in flight, nothing of a response held), and ready for the next one."""
        return (
            not self.awaiting
            and not self.pending
            and self.channel.lane is None
            and self.ready_for_exchange()
        )
