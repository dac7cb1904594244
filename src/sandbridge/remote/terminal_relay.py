"""The laptop's side of terminals over the remote link, in ``sandbridge connect``.

``connect`` serves a Unix socket, ``control.sock`` in its own machine directory (0700,
``places/remotes.py``), which the laptop's ``sandbridge terminal ... HOST:...`` and
``sandbridge shell HOST:SESSION`` reach. A client's first line names the far session,
``{"session": "s-1a2b3c"}``; everything after it is a control conversation with that
session's broker, carried on one stream of the link (``remote/far_terminals.py`` on the
far side). Nothing of the conversation is read here: an approval is signed by the CLI
(with the owner key, which never leaves the laptop) and checked on the far machine; a
terminal's bytes are ciphertext between the attaching client and the worker.

Who may use the socket: this user only, as every control socket (0600 in a 0700
directory, and the peer's uid checked with ``SO_PEERCRED``). When the link is down, or
the far side refuses the stream, the client gets a control refusal line
(``link_down``, ``far_refused``) in place of the broker's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
from collections.abc import Callable
from pathlib import Path

from sandbridge import log
from sandbridge.aio.tasks import TaskSet
from sandbridge.exceptions import RemoteWireError
from sandbridge.places.socket_path import short_path
from sandbridge.protocol.contract import is_session_name
from sandbridge.protocol.jsonline import decode_json
from sandbridge.relay.host.channel import Channel
from sandbridge.relay.host.upstream import UNIX_BUFFER_BYTES
from sandbridge.remote.mux import Mux, MuxStream
from sandbridge.remote.splice import splice
from sandbridge.terminals.control_line import refusal_line

# The first line only names a session: a few dozen bytes.
MAX_FIRST_LINE = 1024
# A command sends its first line at once; one that does not is not waited on.
FIRST_LINE_SECONDS = 10.0
# Connections waiting to be accepted; each CLI command makes one.
BACKLOG = 16
_PEERCRED = struct.Struct("3i")


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    return int(_PEERCRED.unpack(raw)[1])


def parse_first_line(line: bytes) -> str:
    """The far session a client names; ValueError naming the value otherwise."""
    try:
        message = decode_json(line, max_bytes=MAX_FIRST_LINE)
    except ValueError:
        message = None
    if not isinstance(message, dict):
        raise ValueError('the first line must be {"session": NAME}')
    session = message.get("session")
    if not isinstance(session, str) or not is_session_name(session):
        raise ValueError(f"session {session!r:.80} is not a session name")
    return session


class TerminalRelay:
    """``connect``'s control socket for one far machine."""

    def __init__(self, name: str, path: Path, mux: Callable[[], Mux | None]) -> None:
        self.name = name
        self.path = path
        self._mux = mux  # the link now, or None while it is down
        self._tasks = TaskSet()

    async def serve(self) -> None:
        """Accept clients until cancelled; the socket is closed and removed on the way out."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            try:
                with short_path(self.path) as short:
                    listener.bind(str(short))
                os.chmod(self.path, 0o600)
            except OSError as exc:  # the apps still work; terminals say there is no socket
                log.warning("remote.control_socket_failed", path=str(self.path), error=str(exc))
                return
            listener.listen(BACKLOG)
            listener.setblocking(False)
            loop = asyncio.get_running_loop()
            while True:
                conn, _ = await loop.sock_accept(listener)
                if peer_uid(conn) != os.getuid():
                    conn.close()  # another user: nothing, as every control socket
                    continue
                self._tasks.spawn(self._serve_client(conn))
        finally:
            listener.close()
            await self._tasks.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    async def _serve_client(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, channel = await loop.create_unix_connection(
                lambda: Channel(UNIX_BUFFER_BYTES), sock=conn
            )
        except OSError:
            conn.close()
            return
        named = await self._named_session(channel)
        if named is None:
            return
        session, rest = named
        stream = await self._open(channel, session)
        if stream is None:
            return
        log.debug("remote.control_stream", machine=self.name, session=session)
        try:
            if rest:
                await stream.write(rest)
        except ConnectionError:
            channel.abort()
            return
        await splice(channel, stream)

    async def _named_session(self, channel: Channel) -> tuple[str, bytes] | None:
        """The session the client's first line names and the bytes after it; None (the
        client refused or gone) otherwise."""
        try:
            buffered = b""
            async with asyncio.timeout(FIRST_LINE_SECONDS):
                while b"\n" not in buffered and len(buffered) <= MAX_FIRST_LINE:
                    data = await channel.read()
                    if not data:
                        channel.close()
                        return None
                    buffered += data
            line, _, rest = buffered.partition(b"\n")
            return parse_first_line(line[: MAX_FIRST_LINE + 1]), rest
        except ValueError as exc:
            await self._refuse(channel, "malformed", str(exc))
        except (ConnectionError, OSError, TimeoutError):
            channel.abort()
        return None

    async def _open(self, channel: Channel, session: str) -> MuxStream | None:
        """A control stream to ``session`` on the link; None (the client told why) if
        the link is down or the far side refuses it."""
        mux = self._mux()
        try:
            if mux is None or mux.closed is not None:
                raise ConnectionResetError("reconnecting")
            return await mux.open_control(session)
        except ConnectionRefusedError as exc:
            await self._refuse(channel, "far_refused", f"{self.name} refused: {exc}")
        except (ConnectionError, RemoteWireError) as exc:
            await self._refuse(channel, "link_down", f"the link to {self.name} is down: {exc}")
        return None

    async def _refuse(self, channel: Channel, code: str, error: str) -> None:
        """Answer in the broker's place; the client may still be sending its control
        line, which is read and dropped (a close would reset the refusal away)."""
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            await channel.send(refusal_line(code, error))
            await channel.linger_close()
        channel.close()
