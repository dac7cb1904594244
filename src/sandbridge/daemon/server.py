"""The daemon: one process that serves the host half of every session of its user.

A ``run`` client makes its session's runtime dir and registry entry itself, starts the
sandbox itself, and asks the daemon over ``daemon.sock`` to serve the rest: the daemon
runs :func:`~sandbridge.session.lifecycle.open_session` for it, in its own event loop,
for as long as the client's connection lasts. What separates the sessions is what
already separates the connections of one: every listener has its own limits and
watchdogs, and a session that fails (a refused request, an error in its teardown) ends
only its own task; the others never wait for it.

Who may ask: only a peer of this user (``SO_PEERCRED``) in the daemon's own mount
namespace (never a sandbox or a container, even one the socket leaked into), on a
socket that is 0600 in a 0700 dir; and a session's dirs must be the client's own (the
descriptors it sends are the very directories its paths name, and the entry's pid is
the peer's).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import io
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from sandbridge import log
from sandbridge.aio import untrusted_fds
from sandbridge.aio.event_loop import ready
from sandbridge.aio.tasks import TaskSet, first_done, running
from sandbridge.aio.unix_sockets import peer_credentials, peer_shares_mount_namespace
from sandbridge.daemon.builder import RunBuilder, this_install
from sandbridge.daemon.dashboard import DaemonDashboard
from sandbridge.daemon.place import daemon_place
from sandbridge.exceptions import DaemonError, SandbridgeError
from sandbridge.places.registry import SessionEntry
from sandbridge.places.runtime_dir import RuntimeDir, unbound_name
from sandbridge.private_dir import require_private_dir
from sandbridge.protocol import daemon_wire
from sandbridge.protocol.contract import CONTROL_SOCKET, EGRESS_SOCKET, RELAY_SOCKET
from sandbridge.protocol.daemon_wire import Event
from sandbridge.relay.host.app import App
from sandbridge.relay.host.owned_upstream import not_a_network_namespace
from sandbridge.sandbox.host_paths import exposure
from sandbridge.session import options_wire
from sandbridge.session.lifecycle import open_session

# A client sends its request right after connecting; one that does not in this long is
# dropped, so that idle connections cannot pile up.
REQUEST_TIMEOUT = 10.0
# Sessions served at once: far more than one user runs, and each costs a few
# descriptors and listeners; past it a request is refused with a message.
MAX_SESSIONS = 256
# A refused client's messages read (and dropped) before the close: its one request.
MAX_DROPPED_MESSAGES = 4
# accept() failing for want of descriptors or memory, or for a client gone before it was
# taken: not the daemon's end; it waits this long and accepts again (as asyncio's servers).
ACCEPT_RETRY_ERRORS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED}
)
ACCEPT_RETRY_DELAY = 0.5
# Events queued for a client that does not read: its app lines and open messages. Past
# this many the oldest are dropped (the client is the owner's own process; it reads).
MAX_QUEUED_EVENTS = 256


class Outbox:
    """Events for one client, sent in order by one task; never blocks the session."""

    def __init__(self, conn: socket.socket) -> None:
        self._conn = conn
        self._queue: asyncio.Queue[bytes] = asyncio.Queue(MAX_QUEUED_EVENTS)
        self._tasks = TaskSet()
        self._tasks.spawn(self._send())
        self.text = _Lines(self)

    def put(self, kind: Event, value: object) -> None:
        if self._queue.full():
            self._queue.get_nowait()
            log.warning("daemon.event_dropped", kind=kind.value)
        self._queue.put_nowait(daemon_wire.event(kind, value))

    async def _send(self) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError):
            while True:
                await loop.sock_sendall(self._conn, await self._queue.get())
                self._queue.task_done()

    async def close(self, grace: float = 1.0) -> None:
        """Send what is queued (for ``grace`` seconds at most), then stop."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self._queue.join()
        await self._tasks.close()


class _Lines(io.StringIO):
    """A text stream whose complete lines become ``say`` events (the opener's messages)."""

    def __init__(self, outbox: Outbox) -> None:
        super().__init__()
        self._outbox = outbox
        self._partial = ""

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self._outbox.put(Event.SAY, line)
        return len(text)


def app_event(app: App) -> dict[str, Any]:
    data = dataclasses.asdict(app)
    data["action"] = None if app.action is None else app.action.value
    return data


class Daemon:
    """Serves sessions on ``listener`` (a listening ``SOCK_SEQPACKET`` Unix socket);
    thin clients' runs are built by ``builder`` (without one, they are answered
    ``fallback``)."""

    def __init__(self, listener: socket.socket, builder: RunBuilder | None = None) -> None:
        self.listener = listener
        # Every client's task (a session's for its life; others while they are answered).
        self.sessions = TaskSet()
        # Sessions served now: what MAX_SESSIONS bounds (connections yet to send their
        # request are not sessions, and counting them let a few hundred refuse every one).
        self.serving = 0
        self.dashboard = DaemonDashboard()
        self.builder = builder

    async def serve(self) -> None:
        """Accept clients until cancelled; then every session is closed."""
        loop = asyncio.get_running_loop()
        self.listener.setblocking(False)
        try:
            while True:
                try:
                    conn, _ = await loop.sock_accept(self.listener)
                except OSError as exc:
                    if exc.errno not in ACCEPT_RETRY_ERRORS:
                        raise
                    # Out of descriptors or memory (browser connections to every app of
                    # every session count): every session stays served, and the next
                    # client is taken once some are back.
                    log.warning("daemon.accept_failed", error=exc.strerror)
                    await asyncio.sleep(ACCEPT_RETRY_DELAY)
                    continue
                self.sessions.spawn(self._client(conn))
        finally:
            await self.sessions.close()
            await self.dashboard.close()

    async def _client(self, conn: socket.socket) -> None:
        conn.setblocking(False)
        outbox = Outbox(conn)
        try:
            await self._session(conn, outbox)
        except SandbridgeError as exc:
            log.info("daemon.refused", error=str(exc))
            outbox.put(Event.ERROR, str(exc))
            _drop_queued(conn)
        except Exception as exc:  # one session's bug ends that session only
            log.warning("daemon.session_failed", error=repr(exc))
            outbox.put(Event.ERROR, f"the session failed in the daemon: {exc!r}")
        finally:
            await outbox.close()
            # Closed off the loop: descriptors a peer left queued on it are closed with
            # it, and one of them could block that close (aio/untrusted_fds.py).
            untrusted_fds.release_socket(conn)

    async def _session(self, conn: socket.socket, outbox: Outbox) -> None:
        pid, uid = peer_credentials(conn)
        if uid != os.getuid():
            raise DaemonError(f"uid {uid} is not the daemon's user; use your own daemon")
        try:
            ours = peer_shares_mount_namespace(conn, pid)
        except OSError as exc:
            raise DaemonError(f"cannot check pid {pid}'s mount namespace: {exc.strerror}") from None
        if not ours:
            # A sandbox or a container (same uid, own mount namespace) that found the
            # socket some way: never served, whatever it asks (docs/daemon.md).
            raise DaemonError(
                f"pid {pid} is not in the daemon's mount namespace (a sandbox or a "
                "container); the daemon serves only its user's processes on the host"
            )
        fds: list[int] = []
        try:
            data = await _receive_request(conn, fds)
            dashboard = daemon_wire.asks_for_dashboard(data)
            if dashboard and fds:
                raise DaemonError(f"a dashboard request carries no descriptors, not {len(fds)}")
            if daemon_wire.asks_to_run(data):
                self._build_run(conn, outbox, pid, data, fds)
                return
        except BaseException:
            untrusted_fds.release_all(fds, reset=False)
            raise
        if dashboard:
            # The owner's own process on the host (checked above): a new one-time URL.
            outbox.put(Event.DASHBOARD, await self.dashboard.login_url())
            log.info("daemon.dashboard_url", pid=pid, port=self.dashboard.port)
            return
        await self._serve_session(conn, outbox, pid, data, fds)

    def _build_run(
        self, conn: socket.socket, outbox: Outbox, pid: int, data: bytes, fds: list[int]
    ) -> None:
        """A thin client's run (daemon/builder.py): to the builder, or ``fallback``."""
        run = daemon_wire.decode_run_request(data)
        if len(fds) != daemon_wire.RUN_REQUEST_FDS:
            raise DaemonError(
                f"a run request carries {daemon_wire.RUN_REQUEST_FDS} descriptors, not {len(fds)}"
            )
        why = None
        if (run["python"], run["package"]) != this_install():
            why = "the client is not of the daemon's install"
        elif self.builder is None:
            why = "the daemon has no run builder"
        else:
            why = self.builder.forward(daemon_wire.builder_message(pid, run), conn, fds)
        untrusted_fds.release_all(fds, reset=False)
        if why is None:
            log.info("daemon.run_built", pid=pid)
        else:
            outbox.put(Event.FALLBACK, why)

    async def _serve_session(
        self, conn: socket.socket, outbox: Outbox, pid: int, data: bytes, fds: list[int]
    ) -> None:
        runtime_dir: RuntimeDir | None = None
        entry: SessionEntry | None = None
        channel: socket.socket | None = None
        namespace: int | None = None
        try:
            if self.serving >= MAX_SESSIONS:
                raise DaemonError(f"the daemon already serves {MAX_SESSIONS} sessions")
            options, runtime_path, session_path = daemon_wire.decode_request(data)
            namespace = _network_namespace(data, fds)
            runtime_dir = _runtime_dir(Path(runtime_path), fds[0])
            del fds[0]  # the runtime dir owns it now
            entry = SessionEntry.attach(Path(session_path), fds[0])
            del fds[0]
            if fds:
                channel = _terminal_channel(fds[0])
                del fds[0]
            if entry.record.pid != pid:
                owner = entry.record.pid
                raise DaemonError(f"session {entry.id} belongs to pid {owner}, not {pid}")
            served = dataclasses.replace(
                options_wire.decode(options),
                name=entry.id,
                on_register=lambda app: outbox.put(Event.APP, app_event(app)),
                on_unregister=lambda app: outbox.put(Event.GONE, app_event(app)),
                terminal_channel=channel,
                network_namespace=namespace,
                on_change=self.dashboard.notify,
            )
            _remove_stale_sockets(runtime_dir, entry)
        except BaseException:
            untrusted_fds.release_all(fds, reset=False)
            if namespace is not None:
                os.close(namespace)
            if channel is not None:
                untrusted_fds.release_socket(channel)
            if entry is not None:
                entry.remove()  # only closes the descriptor: the client removes the dir
            if runtime_dir is not None:
                runtime_dir.remove()
            raise
        log.info(
            "daemon.session",
            session=entry.id,
            pid=pid,
            apps=len(entry.record.apps),
            namespace=namespace is not None,
        )
        self.serving += 1
        try:
            async with open_session(runtime_dir, served, entry, outbox.text) as session:
                outbox.put(Event.READY, entry.id)
                # The owner's ``stop`` reaches the client, which holds the sandbox.
                async with running(_pass_stop(session.stop_requested, outbox)):
                    with self.dashboard.serving(session):
                        await _until_closed(conn)
        finally:
            self.serving -= 1
            if namespace is not None:
                os.close(namespace)  # the session's owned upstream had its own copy
        log.info("daemon.session_end", session=entry.id)


async def _pass_stop(stop: asyncio.Event, outbox: Outbox) -> None:
    await stop.wait()
    outbox.put(Event.STOP, None)


def _drop_queued(conn: socket.socket) -> None:
    """Read what the client sent and was not read (a request refused before it was
    read): closing with it unread resets the connection, and the client would lose the
    refusal. Its descriptors are released off the loop."""
    fds: list[int] = []
    with contextlib.suppress(OSError):
        for _ in range(MAX_DROPPED_MESSAGES):
            data, _ = untrusted_fds.receive(
                conn, daemon_wire.MAX_MESSAGE_BYTES + 1, daemon_wire.MAX_REQUEST_FDS, fds
            )
            untrusted_fds.release_all(fds)
            if not data:
                break


async def _receive_request(conn: socket.socket, fds: list[int]) -> bytes:
    async with asyncio.timeout(REQUEST_TIMEOUT):
        await ready(conn)
    data, truncated = untrusted_fds.receive(
        conn, daemon_wire.MAX_MESSAGE_BYTES + 1, daemon_wire.MAX_REQUEST_FDS, fds
    )
    if truncated or len(fds) > daemon_wire.MAX_REQUEST_FDS:
        # The kernel drops what does not fit: more descriptors than the room, or any
        # once this process has no descriptor left for them.
        raise DaemonError(
            f"a request carries at most {daemon_wire.MAX_REQUEST_FDS} descriptors, and the "
            "daemon must have room for them: not all of this one's could be received"
        )
    if len(data) > daemon_wire.MAX_MESSAGE_BYTES:
        raise DaemonError(f"a request is at most {daemon_wire.MAX_MESSAGE_BYTES} bytes")
    return data


def _runtime_dir(path: Path, fd: int) -> RuntimeDir:
    """The client's runtime dir: ``path`` must be a private dir of this user and ``fd``
    that very directory (the client holds its lock; the descriptor shares it)."""
    if (why := exposure(path)) is not None:
        # Its sandbox would see it all: the daemon's socket, other sessions' sockets.
        raise DaemonError(f"runtime dir {path}: {why}")
    try:
        require_private_dir(path, "runtime dir", DaemonError)
        same = os.path.samestat(os.fstat(fd), os.lstat(path))
    except OSError as exc:
        raise DaemonError(f"runtime dir {path}: {exc.strerror}") from None
    if not same:
        raise DaemonError(f"runtime dir {path} is not the directory sent with it")
    return RuntimeDir(path=path, owned=False, _fd=fd, served=True)


def _terminal_channel(fd: int) -> socket.socket:
    """The third descriptor: the host's end of the terminal channel, a Unix
    ``SOCK_SEQPACKET`` socket (``fd`` stays the caller's to release if it is not)."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        sock = None
    if sock is None or sock.family != socket.AF_UNIX or sock.type != socket.SOCK_SEQPACKET:
        if sock is not None:
            sock.detach()
        raise DaemonError(
            "the third descriptor is not a terminal channel (a Unix SOCK_SEQPACKET socket)"
        )
    return sock


def _network_namespace(data: bytes, fds: list[int]) -> int | None:
    """Check how many descriptors the request carries, and take the last one out of
    ``fds`` if the request says it is the sandbox's network namespace: checked as the
    host checks the one the sandbox entry sends (refused, it stays in ``fds``)."""
    if not daemon_wire.carries_namespace(data):
        if len(fds) not in (2, 3):
            raise DaemonError(f"a request carries 2 or 3 descriptors, not {len(fds)}")
        return None
    if len(fds) not in (3, 4):
        raise DaemonError(
            f"a request with a network namespace carries 3 or 4 descriptors, not {len(fds)}"
        )
    if (what := not_a_network_namespace(fds[-1])) is not None:
        raise DaemonError(
            f"the last descriptor is {what}, not a network namespace (the request says "
            "'namespace': true)"
        )
    return fds.pop()


def _remove_stale_sockets(runtime_dir: RuntimeDir, entry: SessionEntry) -> None:
    """A session served again after a restart: the sockets the last daemon bound are
    still there (a SIGKILL removes nothing); bind them anew. Removed through the dirs'
    descriptors, never following a link the sandbox may have put there. A name that
    cannot be removed (the sandbox made ``relay.sock`` a directory) is a refusal naming
    it: the session cannot be served, and the caller releases what it holds."""
    for fd, directory, name in (
        (runtime_dir.fd, runtime_dir.path, RELAY_SOCKET),
        (runtime_dir.fd, runtime_dir.path, EGRESS_SOCKET),
        (entry.fd, entry.path, CONTROL_SOCKET),
    ):
        if (why := unbound_name(fd, name)) is not None:
            raise DaemonError(
                f"{directory / name}: cannot be removed to be bound anew ({why}); "
                "the session is not served again (the sandbox can write its runtime dir)"
            )


async def _until_closed(conn: socket.socket) -> None:
    """Wait until the client leaves (its messages after the request are ignored)."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(OSError):
        while await loop.sock_recv(conn, 1024):
            pass


async def run_daemon(
    inherited: socket.socket | None = None, builder: list[str] | None = None
) -> int:
    """Serve until SIGINT or SIGTERM (``inherited``: systemd's socket; ``builder``: the
    command line of the run builder, daemon/builder.py); return the status."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[int] = []

    def on_signal(signum: int) -> None:
        received.append(signum)
        stop.set()

    with daemon_place(inherited) as place:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, signum)
        run_builder = None if builder is None else RunBuilder(builder)
        try:
            if run_builder is not None:
                run_builder.start()
            where = "the socket from systemd" if place.bound is None else str(place.bound)
            pid = os.getpid()
            print(f"sandbridge: daemon {pid} serving on {where}", file=sys.stderr, flush=True)
            daemon = Daemon(place.listener, run_builder)
            async with running(daemon.serve(), stop.wait()) as tasks:
                done = await first_done(*tasks)
                for task in done:
                    task.result()  # the accept loop ending by itself is an error: raise it
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            if run_builder is not None:
                await run_builder.close()
    return 128 + received[0] if received else 0
