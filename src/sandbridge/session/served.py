"""A ``run`` session whose host half the user's daemon serves (docs/daemon.md).

The client keeps what makes the session its own: it makes the runtime dir and the
registry entry (and holds their locks), starts the sandbox and kills it. The daemon gets
the session's options and descriptors of both dirs, of the terminal channel and of the
sandbox's network namespace (the entry sends it to the client before the command starts;
the daemon's app connections are made in it: relay/host/owned_upstream.py), serves
registrations, app listeners, the egress gate and the terminal broker, and sends back
what the owner should see. When the client's connection ends, the daemon closes the
session. When the daemon's end does (it stopped, or was killed), the client sends its
request again to the next daemon, which serves the session's recorded apps on their old
URLs (docs/daemon.md).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sandbridge import log
from sandbridge.aio.tasks import running
from sandbridge.aio.unix_sockets import peer_credentials
from sandbridge.exceptions import DaemonError
from sandbridge.places.registry import SessionEntry, daemon_sockets
from sandbridge.places.runtime_dir import RuntimeDir
from sandbridge.protocol import daemon_wire
from sandbridge.protocol.daemon_wire import (
    CLOSE_TIMEOUT,
    CONNECT_TIMEOUT,
    READY_TIMEOUT,
    RECONNECT_INTERVAL,
    Event,
)
from sandbridge.protocol.publish_rules import PublishAction
from sandbridge.relay.host.app import App
from sandbridge.session import options_wire
from sandbridge.session.options import SessionOptions, create_entry


def connect() -> socket.socket | None:
    """A connection to this user's daemon, or None when none runs (no socket, nobody
    listening) or the socket is not this user's daemon's (another uid answered)."""
    for path in daemon_sockets():
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        sock.settimeout(CONNECT_TIMEOUT)
        try:
            sock.connect(str(path))
            _, uid = peer_credentials(sock)
        except OSError:
            sock.close()
            continue
        if uid != os.getuid():
            print(f"sandbridge: {path} answers as uid {uid}, not you; not used", file=sys.stderr)
            sock.close()
            continue
        return sock
    return None


@asynccontextmanager
async def served_session(
    daemon: socket.socket,
    runtime_dir: RuntimeDir,
    options: SessionOptions,
    stop: asyncio.Event,
) -> AsyncIterator[SessionEntry]:
    """Have the daemon serve this session's host half for the block's length; if the
    daemon goes away meanwhile, have the next one serve it again as soon as it is up.
    ``stop`` is set when the daemon says the owner asked the session to end."""
    entry = create_entry(runtime_dir, options)
    request, fds = serve_request(runtime_dir, entry, options)
    link = _Link(request, array.array("i", fds).tobytes(), options, stop)
    try:
        await link.open(daemon)
        log.debug("daemon.served", session=entry.id)
        async with running(link.follow()):
            yield entry
        await link.close()
    finally:
        link.sock.close()
        entry.remove()
        runtime_dir.remove()


def serve_request(
    runtime_dir: RuntimeDir, entry: SessionEntry, options: SessionOptions
) -> tuple[bytes, list[int]]:
    """The request that has the daemon serve this session, and its descriptors."""
    fds = [runtime_dir.fd, entry.fd]
    if options.terminal_channel is not None:
        fds.append(options.terminal_channel.fileno())
    if options.network_namespace is not None:
        fds.append(options.network_namespace)  # last, as the request says
    path = str(runtime_dir.path)
    encoded = options_wire.encode(options)
    namespace = options.network_namespace is not None
    return daemon_wire.request(encoded, path, str(entry.path), namespace=namespace), fds


class _Link:
    """The connection to the daemon that serves this session, replaced when a new
    daemon comes up after the last one went away (the request is sent again: the new
    daemon finds the session's apps in its entry)."""

    def __init__(
        self, request: bytes, rights: bytes, options: SessionOptions, stop: asyncio.Event
    ) -> None:
        self.request = request
        self.rights = rights
        self.options = options
        self.stop = stop
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)

    async def open(self, sock: socket.socket) -> None:
        """Send the request on ``sock`` and act on events until the session is served."""
        self.sock.close()
        self.sock = sock
        sock.settimeout(CONNECT_TIMEOUT)  # one small message: sent at once
        with contextlib.suppress(OSError):  # refused before it was read: the answer waits
            sock.sendmsg([self.request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, self.rights)])
        sock.setblocking(False)
        try:
            async with asyncio.timeout(READY_TIMEOUT):
                await self._until_ready(sock)
        except OSError as exc:
            raise DaemonError(f"{daemon_wire.CLOSED} ({exc.strerror})") from None
        except TimeoutError:
            raise DaemonError(daemon_wire.NOT_READY) from None

    async def _until_ready(self, sock: socket.socket) -> None:
        reset = False
        while True:
            try:
                kind, _ = await _next_event(sock, self.options, self.stop)
            except ConnectionResetError:
                # A daemon that closed with our request unread (it refused at once):
                # the reset is reported first, once; what it sent before follows.
                if reset:
                    raise
                reset = True
                continue
            if kind is Event.READY:
                return

    async def follow(self) -> None:
        """Act on the daemon's events; when it leaves, wait for the next one."""
        while True:
            try:
                while True:
                    await _next_event(self.sock, self.options, self.stop)
            except (DaemonError, OSError) as exc:
                _say(daemon_wire.stopped_serving(exc))
            await self._reconnect()
            _say(daemon_wire.SERVES_AGAIN)

    async def _reconnect(self) -> None:
        refusal = None
        while True:
            await asyncio.sleep(RECONNECT_INTERVAL)
            sock = connect()
            if sock is None:
                continue
            try:
                await self.open(sock)
                return
            except (DaemonError, OSError, TimeoutError) as exc:
                if str(exc) != refusal:  # once, not every interval
                    refusal = str(exc)
                    _say(daemon_wire.cannot_serve_yet(exc))

    async def close(self) -> None:
        """Leave, and wait until the daemon has closed the session's listeners."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError, TimeoutError):
            self.sock.shutdown(socket.SHUT_WR)
            async with asyncio.timeout(CLOSE_TIMEOUT):
                while await loop.sock_recv(self.sock, daemon_wire.MAX_MESSAGE_BYTES):
                    pass


def _say(text: str) -> None:
    print(f"sandbridge: {text}", file=sys.stderr, flush=True)


async def _next_event(
    daemon: socket.socket, options: SessionOptions, stop: asyncio.Event
) -> tuple[Event, object]:
    """Read one event and act on it; the daemon leaving or refusing raises."""
    data = await asyncio.get_running_loop().sock_recv(daemon, daemon_wire.MAX_MESSAGE_BYTES)
    if not data:
        raise DaemonError(daemon_wire.CLOSED)
    kind, value = daemon_wire.decode_event(data)
    if kind is Event.ERROR:
        raise DaemonError(daemon_wire.refused(value))
    if kind is Event.SAY:
        print(value, file=sys.stderr, flush=True)
    elif kind is Event.APP and options.on_register is not None:
        options.on_register(_app(value))
    elif kind is Event.GONE and options.on_unregister is not None:
        options.on_unregister(_app(value))
    elif kind is Event.STOP:
        stop.set()
    return kind, value


def _app(value: object) -> App:
    if not isinstance(value, dict):
        raise DaemonError(f"an app event must be an object, got {value!r:.80}")
    fields: dict[str, Any] = dict(value)
    try:
        action = fields.pop("action")
        return App(**fields, action=None if action is None else PublishAction(action))
    except (KeyError, TypeError, ValueError) as exc:
        raise DaemonError(f"an app event is malformed: {exc}") from None
