"""``sandbridge serve-stdio``: the far machine's end of the remote link.

It speaks the remote protocol on its stdin and stdout (whatever carries them: an SSH
channel, ``kubectl exec -i``, a pipe) and serves the apps of this user's running
sessions, as the registry lists them (``session.json`` in each session's host-only
directory, kept by the session's host half, daemon or not). It tells the laptop the
list, again whenever it changes (the registry read again when inotify says it changed:
``places/registry_watch.py``), and opens a byte stream to an app when asked. The list
also describes each session for the laptop's dashboard (``remote/far_sessions.py``: its
facts and terminal requests).

It reaches an app the way the session's own host half does: a stream-mode connection
to the session's ``upstream.sock`` (``relay/host/upstream.py``: the socket checked as the
user's, never followed through a link; the shim's answer and any handed-over socket
checked). So the far app listener's Host and Origin checks are not on this path; the
laptop's own listener for the app makes them, exactly as for a local app.

Hostile peer: the laptop may ask for anything. Only a (session, port) pair in the list
just sent is opened: a session of another user, an ended session, a port that is not
a registered app of that session, a private app (its token stays on the far machine),
or a session whose runtime dir is not a private dir of this user is refused with the
reason, and nothing else is touched.

A control stream (``OPEN`` with ``"control":"terminal"``) is served by
``remote/far_terminals.py``: the session's own control socket, terminal ops only.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from sandbridge import log
from sandbridge.aio.tasks import TaskSet, running
from sandbridge.aio.unix_sockets import Pump
from sandbridge.exceptions import (
    RemoteLinkError,
    SessionError,
    UpstreamError,
    WireError,
)
from sandbridge.places.registry import list_sessions
from sandbridge.places.registry_watch import RegistryWatch
from sandbridge.private_dir import require_private_dir
from sandbridge.protocol.contract import UPSTREAM_SOCKET
from sandbridge.protocol.jsonline import encode_object
from sandbridge.protocol.remote_wire import (
    MAX_APPS,
    MAX_CONTROL_BYTES,
    Described,
    FarApp,
    OpenControl,
    OpenStream,
    Role,
    encode_apps,
)
from sandbridge.relay.host.channel import Channel
from sandbridge.relay.host.upstream import open_stream
from sandbridge.remote.far_sessions import SessionDescriber
from sandbridge.remote.far_terminals import serve_terminal_control
from sandbridge.remote.mux import Mux, MuxStream
from sandbridge.remote.stream_transport import StreamTransport
from sandbridge.remote.transport import Link, widen_pipe


def this_users_apps(private: bool = False) -> tuple[tuple[FarApp, ...], dict[str, Path]]:
    """The apps of this user's running sessions that the link may carry, and each
    session's runtime dir. Sessions that do not name their runtime dir (started by an
    older sandbridge) are left out, and private apps unless ``private`` (the laptop
    serves them behind a token of its own: the far token never crosses), and apps beyond
    what one APPS frame carries (:data:`MAX_APPS`, :data:`MAX_CONTROL_BYTES`; the oldest
    sessions first) with a warning: the laptop refuses more."""
    apps: list[FarApp] = []
    places: dict[str, Path] = {}
    for record in list_sessions():
        if not record.runtime_dir:
            continue
        places[record.id] = Path(record.runtime_dir)
        apps += [
            FarApp(record.id, app.port, app.base_path, app.private)
            for app in record.apps
            if private or not app.private
        ]
    served = apps[:MAX_APPS]
    # An APPS list must fit its frame too: 1,024 apps with base paths of 1 KiB (sixteen
    # sandboxes registering the longest they may) do not, and the list could not be sent.
    while len(encode_object(encode_apps(tuple(served)))) > MAX_CONTROL_BYTES:
        served = served[: len(served) * 9 // 10]
    if len(served) < len(apps):
        log.warning("remote.too_many_apps", apps=len(apps), served=len(served))
    return tuple(served), places


def fit(apps: tuple[FarApp, ...], described: Described) -> Described:
    """As many of ``described`` (the oldest first) as fit in one APPS frame beside
    ``apps``: the apps are what the laptop serves, the descriptions what it shows."""
    while described and len(encode_object(encode_apps(apps, described))) > MAX_CONTROL_BYTES:
        described = described[: len(described) * 9 // 10]
    return described


class FarServer:
    """Serves one link: the app list, and a stream to an app per OPEN."""

    def __init__(self, link: Link) -> None:
        self.mux = Mux(link, Role.FAR, on_open=self._on_open)
        self._tasks = TaskSet()
        self._apps: tuple[FarApp, ...] | None = None
        self._described: Described = ()
        self._describer = SessionDescriber()
        self._places: dict[str, Path] = {}

    async def serve(self) -> str:
        """Serve until the link ends; return why it ended."""
        await self.mux.handshake()
        try:
            async with RegistryWatch() as watch:
                await self._refresh()
                async with running(self._follow_registry(watch)):
                    return await self.mux.run()
        finally:
            await self._tasks.close()

    async def _follow_registry(self, watch: RegistryWatch) -> None:
        while True:
            await watch.changed()
            await self._refresh()

    async def _refresh(self) -> None:
        apps, places = this_users_apps(self.mux.state.peer_serves_private)
        described = fit(apps, await asyncio.to_thread(self._describer.describe))
        if apps != self._apps or described != self._described:
            self._apps, self._places, self._described = apps, places, described
            self.mux.send_apps(apps, described)

    def _on_open(self, stream: MuxStream, event: OpenStream | OpenControl) -> None:
        if isinstance(event, OpenControl):
            self._tasks.spawn(serve_terminal_control(self.mux, stream, event.session))
        else:
            self._tasks.spawn(self._serve_stream(stream, event))

    async def _serve_stream(self, stream: MuxStream, event: OpenStream) -> None:
        known = any(
            app.session == event.session and app.port == event.port for app in self._apps or ()
        )
        if not known:
            self.mux.refuse(
                stream,
                f"no app on port {event.port} in session {event.session!r} of this user "
                "(or it is private)",
            )
            return
        runtime_dir = self._places[event.session]
        try:
            require_private_dir(runtime_dir, "runtime dir", SessionError)
            channel, rest = await open_stream(runtime_dir / UPSTREAM_SOCKET, event.port)
        except (SessionError, UpstreamError, WireError, OSError) as exc:
            log.debug("remote.open_failed", session=event.session, port=event.port, error=str(exc))
            self.mux.refuse(stream, f"session {event.session!r} port {event.port}: {exc}")
            return
        self.mux.opened(stream)
        await pump(channel, rest, self.mux, stream)


async def pump(channel: Channel, rest: bytes, mux: Mux, stream: MuxStream) -> None:
    """Copy between the app's connection and the stream, both ways, from the event loop's
    callbacks (two linked pumps, the stream a transport: ``remote/stream_transport.py``),
    ``rest`` (what the shim sent after its answer) first; return once both are closed.
    Backpressure and half closes cross as in a WebSocket tunnel (``relay/listener/tunnel.py``)."""
    app_side, link_side = Pump(), Pump()
    app_side.link(link_side)
    transport = StreamTransport(mux, stream, link_side)
    if rest:
        transport.write(rest)
    if channel.closed.done():  # the app has closed already: what it sent, then the end
        transport.write(channel.take())
        transport.close()
        return
    channel.hand_over(app_side)
    channel.catch_up(app_side)
    try:
        await asyncio.gather(asyncio.shield(app_side.lost), asyncio.shield(link_side.lost))
    except BaseException:
        app_side.abort()
        link_side.abort()
        raise


def check_stdio() -> None:
    """Refuse standard input or output that the event loop cannot wait on (``/dev/null``,
    a regular file, a device that is not a terminal): libuv aborts the process on one.
    A pipe, a socket or a terminal will do; the link is whatever carries them."""
    for fd, name in ((0, "standard input"), (1, "standard output")):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            mode = 0
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd):
            continue
        try:
            what = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            what = "closed"
        raise RemoteLinkError(
            f"serve-stdio: {name} is {what}, not a pipe, socket or terminal; it is the far "
            "end of sandbridge connect (run it as ssh HOST sandbridge serve-stdio, or "
            "connect --via CMD: docs/remote.md)"
        )


async def stdio_link() -> Link:
    """This process's stdin and stdout as a link. Descriptor 1 is moved away first and
    pointed at stderr, so that nothing printed by accident corrupts the link."""
    loop = asyncio.get_running_loop()
    link_out = os.dup(1)
    os.dup2(2, 1)
    for fd in (0, link_out):
        widen_pipe(fd)
    reader = asyncio.StreamReader(limit=2**20)
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader),
        open(os.dup(0), "rb", buffering=0),  # noqa: SIM115  (the transport owns it)
    )
    write_transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin,
        open(link_out, "wb", buffering=0),  # noqa: SIM115  (the transport owns it)
    )
    writer = asyncio.StreamWriter(write_transport, protocol, reader, loop)

    async def close() -> None:
        read_transport.close()
        write_transport.close()

    return Link(reader, writer, close, "stdio", write_transport.get_write_buffer_size)


async def serve_stdio() -> int:
    """Serve the link on stdin and stdout until it ends: 0 when the laptop left, 2 when
    the link broke the protocol or never began."""
    link = await stdio_link()
    try:
        reason = await FarServer(link).serve()
    except RemoteLinkError as exc:
        log.warning("remote.serve_stdio_failed", error=str(exc))
        return 2
    finally:
        await link.close()
    return 2 if reason.startswith("protocol error") else 0
