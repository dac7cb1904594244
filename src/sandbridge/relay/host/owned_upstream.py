"""App connections that the host owns alone, for sandboxes sandbridge runs itself.

The threat (docs/security.md, "An adopted app socket turned blocking"): a socket handed
over by the shim is a file the sandbox may keep a copy of and clear ``O_NONBLOCK`` on;
uvloop's ``write()`` to an app that reads nothing then blocks the host's event loop. The
defence: the host makes the app connection itself, from a TCP socket created in the
sandbox's network namespace by the socket minter (:mod:`.socket_minter`), a process of
the host's that no sandbox process can reach. The host connects it to
``127.0.0.1:<registered port>`` on its event loop and hands it to uvloop's own transport;
no sandbox process ever holds that file, so its flags stay the host's.

How the host learns the namespace: the sandbox entry, before it starts the command
(while nothing of the sandbox's command runs), sends a descriptor of its network
namespace on a private socket pair (``--namespace-fd``), the way the terminal channel
is inherited. The first app connection reads it (:class:`PendingOwnedUpstream`); where
that namespace is the host's own (``--net full``) the host makes the sockets itself.
"""

from __future__ import annotations

import array
import asyncio
import collections
import contextlib
import fcntl
import os
import socket
import sys
from pathlib import Path

from sandbridge import log
from sandbridge.aio import event_loop
from sandbridge.exceptions import AppUnreachable, SandboxError, StreamRefused, UpstreamError
from sandbridge.places import host_commands
from sandbridge.relay.host.app_connector import connect_app
from sandbridge.relay.host.channel import Channel
from sandbridge.relay.host.socket_minter import ANSWER, MAX_BATCH, app_socket

# ioctl(2) requests on a namespace file (linux/nsfs.h): the user namespace that owns it,
# and its kind.
NS_GET_USERNS = 0xB701
NS_GET_NSTYPE = 0xB703
CLONE_NEWNET = 0x40000000
# Sockets minted ahead: a new app connection takes one without a round trip to the
# minter; a burst of this many waits for none. Refilled when half are taken.
POOL_SIZE = 8
# Socket buffers of an owned app connection: what the handoff path's Channel reads with.
CHANNEL_BUFFER_BYTES = 256 * 1024
# The entry sends its namespace before the command starts; an app connection can only
# come after the command registered an app. This long is far beyond that.
NAMESPACE_TIMEOUT = 10.0
# A minter that has not answered in this long is not going to.
MINT_TIMEOUT = 5.0
# How long the session's end waits for the minter to exit after its channel closed.
EXIT_TIMEOUT = 5.0
# After a minter that could not start, app connections are refused for this long before
# one starts a minter again: a sandbox keeping the owner's process limit full gets
# refusals, not a process spawned per connection.
RETRY_SECONDS = 1.0


def namespace_type(fd: int) -> int:
    """The ``CLONE_NEW*`` kind of the namespace file ``fd``."""
    return fcntl.ioctl(fd, NS_GET_NSTYPE)


def not_a_network_namespace(fd: int) -> str | None:
    """Why ``fd`` is not a network namespace (what it is instead), or None if it is one.

    One rule for both places that take a namespace: the host from the sandbox entry
    (:func:`receive_namespace`) and the daemon from a ``run`` client. What the descriptor
    names is read first (``/proc/self/fd/N``: the kernel's own name for it, no file
    system asked), and only a namespace file gets the ``ioctl``: on a file of a FUSE
    mount an ``ioctl`` goes to the file system's server, which could keep it waiting."""
    try:
        name = os.readlink(f"/proc/self/fd/{fd}")
    except OSError as exc:
        return f"an unreadable descriptor ({exc.strerror})"
    if not name.startswith("net:["):
        return f"{name[:80]!r}"
    try:
        kind = namespace_type(fd)
    except OSError as exc:
        return f"{name!r}, whose kind cannot be read ({exc.strerror})"
    return None if kind == CLONE_NEWNET else f"{name!r} of kind {kind:#x}"


def _same_file(fd: int, path: str) -> bool:
    mine, theirs = os.stat(path), os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


async def receive_namespace(channel: socket.socket) -> int:
    """The network namespace descriptor the entry sent on ``channel`` (non-blocking).

    Raises :class:`UpstreamError` if none comes, or what comes is not exactly one
    network namespace."""
    fds: list[int] = []
    try:
        async with asyncio.timeout(NAMESPACE_TIMEOUT):
            while True:
                try:
                    _, ancdata, flags, _ = channel.recvmsg(
                        1, socket.CMSG_SPACE(4 * 4), socket.MSG_CMSG_CLOEXEC
                    )
                    break
                except BlockingIOError:
                    await event_loop.ready(channel)
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(array.array("i", payload[: len(payload) - len(payload) % 4]))
        if len(fds) != 1 or flags & socket.MSG_CTRUNC:
            raise UpstreamError(f"the sandbox entry sent {len(fds)} namespace descriptors, not 1")
        if (what := not_a_network_namespace(fds[0])) is not None:
            raise UpstreamError(f"the sandbox entry sent {what}, not a network namespace")
    except TimeoutError:
        raise UpstreamError("the sandbox entry sent no network namespace") from None
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        raise UpstreamError(f"the sandbox's network namespace is unusable: {exc}") from None
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds[0]


def minter_argv(user_fd: int, net_fd: int, channel_fd: int) -> list[str]:
    """``nsenter`` into the namespaces (by descriptor: no path or PID to race), then the
    minter on an isolated interpreter given this sandbridge's directory alone (it needs
    nothing but the standard library)."""
    import sandbridge

    package = str(Path(sandbridge.__file__).resolve().parent.parent)
    boot = (
        f"import sys; sys.path.append({package!r}); "
        "from sandbridge.relay.host.socket_minter import main; sys.exit(main(sys.argv[1:]))"
    )
    return [
        host_commands.require("nsenter"),
        f"--user=/proc/self/fd/{user_fd}",
        f"--net=/proc/self/fd/{net_fd}",
        "--preserve-credentials",
        "--",
        sys.executable,
        "-I",
        "-S",
        "-c",
        boot,
        str(channel_fd),
        str(os.getpid()),
    ]


class OwnedUpstream:
    """Opens app connections from sockets in the sandbox's network namespace: minted by
    the minter process, or made here when that namespace is the host's own."""

    def __init__(
        self, channel: socket.socket | None, process: asyncio.subprocess.Process | None
    ) -> None:
        self._channel = channel  # None: the host's own namespace, no minter
        self._process = process
        self._loop = asyncio.get_running_loop()
        self._pool: collections.deque[socket.socket] = collections.deque()
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._asked = 0
        self._broken: str | None = None
        if channel is not None:
            self._loop.add_reader(channel.fileno(), self._answered)

    @classmethod
    async def start(cls, net_fd: int) -> OwnedUpstream:
        """Start the minter for the network namespace ``net_fd`` (taken over: closed here)."""
        with contextlib.ExitStack() as fds:
            fds.callback(os.close, net_fd)
            if _same_file(net_fd, "/proc/self/ns/net"):
                return cls(None, None)
            user_fd = fcntl.ioctl(net_fd, NS_GET_USERNS)
            fds.callback(os.close, user_fd)
            host_end, minter_end = socket.socketpair(
                socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC
            )
            fds.callback(minter_end.close)
            try:
                process = await asyncio.create_subprocess_exec(
                    *minter_argv(user_fd, net_fd, minter_end.fileno()),
                    stdin=asyncio.subprocess.DEVNULL,
                    pass_fds=(user_fd, net_fd, minter_end.fileno()),
                    # Not in the terminal's process group: a Ctrl-C is the session's to
                    # handle; the minter ends when its channel closes.
                    start_new_session=True,
                )
            except BaseException:
                host_end.close()
                raise
        host_end.setblocking(False)
        owned = cls(host_end, process)
        try:
            # A minter that could not enter the namespaces has exited: found out here, so
            # that the session can still take the shim's handoff.
            owned._pool.appendleft(await owned._socket())
        except BaseException:
            await owned.close()
            raise
        log.debug("upstream.minter_started", pid=process.pid)
        return owned

    async def open(self, port: int) -> Channel:
        """A connection to the app on ``port`` in the sandbox, that only the host holds.

        Raises :class:`StreamRefused` when the port takes no connection on any loopback
        address (as the shim's answer would), :class:`UpstreamError` when the minter is
        gone."""
        try:
            # One socket per address tried: each minted socket reaches both.
            sock = await connect_app(port, lambda _address: self._socket())
        except AppUnreachable as exc:
            raise StreamRefused(f"could not reach sandbox port {port}: {exc}") from None
        try:
            _, channel = await self._loop.create_connection(
                lambda: Channel(CHANNEL_BUFFER_BYTES), sock=sock
            )
        except BaseException:
            sock.close()
            raise
        channel.host_only = True
        return channel

    async def _socket(self) -> socket.socket:
        """A new unconnected, non-blocking TCP socket in the sandbox's namespace: a
        dual-stack one that reaches every app address (:func:`.socket_minter.app_socket`)."""
        if self._channel is None:
            sock = app_socket()
            sock.setblocking(False)
            return sock
        while not self._pool:
            if self._broken is not None:
                raise UpstreamError(self._broken)
            self._refill()
            waiter = self._loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout(MINT_TIMEOUT):
                    await waiter
            except TimeoutError:
                self._break(f"the socket minter did not answer in {MINT_TIMEOUT:g} s")
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
        sock = self._pool.popleft()
        self._refill()
        return sock

    def _refill(self) -> None:
        """Ask for sockets when fewer than half the pool are here or on their way."""
        assert self._channel is not None
        if self._broken is not None or len(self._pool) + self._asked > POOL_SIZE // 2:
            return
        count = min(MAX_BATCH, POOL_SIZE - len(self._pool) - self._asked)
        try:
            self._channel.send(bytes([count]))  # one byte to a socket nothing fills: no wait
        except OSError as exc:
            self._break(f"the socket minter is gone: {exc}")
            return
        self._asked += count

    def _answered(self) -> None:
        """The minter's answers: their sockets join the pool, the first waiters wake."""
        assert self._channel is not None
        while True:
            try:
                data, ancdata, _, _ = self._channel.recvmsg(
                    1, socket.CMSG_SPACE(MAX_BATCH * 4), socket.MSG_CMSG_CLOEXEC
                )
            except BlockingIOError:
                break
            except OSError as exc:
                self._break(f"the socket minter is gone: {exc}")
                return
            if not data:
                self._break("the socket minter exited")
                return
            fds = array.array("i")
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(payload[: len(payload) - len(payload) % 4])
            self._asked = max(0, self._asked - len(fds))
            for fd in fds:
                sock = socket.socket(fileno=fd)
                sock.setblocking(False)
                self._pool.append(sock)
            if data != ANSWER or not fds:
                self._break("the socket minter answered what it never answers")
                return
        while self._waiters and len(self._pool) >= 1:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _break(self, reason: str, quiet: bool = False) -> None:
        if self._broken is None:
            if not quiet:
                log.warning("upstream.minter_broken", reason=reason)
            self._broken = reason
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)

    @property
    def broken(self) -> str | None:
        """Why this minter makes no more sockets (it exited, stopped answering, or was
        closed), or ``None`` while it serves."""
        return self._broken

    async def close(self) -> None:
        """Close the pool and the minter's channel, and wait for the minter to exit;
        a connection waiting for a socket is refused at once."""
        self._break("closed", quiet=True)
        while self._pool:
            self._pool.pop().close()
        if self._channel is not None:
            self._loop.remove_reader(self._channel.fileno())
            self._channel.close()
        if self._process is not None:
            try:
                async with asyncio.timeout(EXIT_TIMEOUT):
                    await self._process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self._process.kill()
                await self._process.wait()

    @property
    def minter_pid(self) -> int | None:
        """The minter's PID (None without one: the host's own namespace)."""
        return None if self._process is None else self._process.pid


class PendingOwnedUpstream:
    """The owned upstream of a session whose entry sends its namespace on ``channel``
    (or that has it already: ``namespace``, taken over): started by the first app
    connection that needs it (the namespace is there by then).

    The shim's handoff serves the session instead only where it has no owned upstream to
    start: the entry sent no namespace (it does so before the command starts, so that is
    never the sandbox's doing), or the host has no ``nsenter``. A minter that could not
    start for any other reason (the owner's process limit, which the sandbox can keep
    full with processes of its own; a minter that never answers) is no reason to take the
    handoff, which the sandbox could then abuse: that connection gets a 502, and a later
    one, :data:`RETRY_SECONDS` after at the soonest, starts a minter again. A minter that
    exits or stops answering later is started anew the same way."""

    def __init__(
        self,
        channel: socket.socket | None,
        retry_seconds: float | None = None,
        *,
        namespace: int | None = None,
    ) -> None:
        if channel is not None:
            channel.setblocking(False)
        self._channel: socket.socket | None = channel
        self._lock = asyncio.Lock()
        self._owned: OwnedUpstream | None = None
        # Received (or given: the daemon's session, whose run client received it and
        # sent it with its request), and kept for the session: a broken minter is
        # started anew in it.
        self._namespace: int | None = namespace
        self._failed: str | None = None  # no owned upstream for this session: the handoff
        self._retry_seconds = RETRY_SECONDS if retry_seconds is None else retry_seconds
        self._not_started: str | None = None
        self._retry_at = 0.0

    async def get(self) -> OwnedUpstream | None:
        """The owned upstream, or ``None`` where the session has none (logged once): the
        shim's handoff then serves it. Raises :class:`UpstreamError` while a minter cannot
        start (see the class's docstring)."""
        async with self._lock:
            if self._owned is not None and self._owned.broken is not None:
                # A minter that exited or stopped answering is started anew (the sandbox
                # can starve it of CPU; it cannot reach it), on the same terms as a first
                # start: refused, then tried again RETRY_SECONDS later.
                reason = self._owned.broken
                await self._owned.close()
                self._owned = None
                log.warning("upstream.minter_restarting", reason=reason)
            if self._owned is not None or self._failed is not None:
                return self._owned
            if self._namespace is None:
                assert self._channel is not None, "given a channel or a namespace"
                # A cancelled first connection leaves the message for the next one.
                try:
                    self._namespace = await receive_namespace(self._channel)
                except UpstreamError as exc:
                    self._give_up(str(exc))
                    return None
                finally:
                    if self._namespace is not None or self._failed is not None:
                        self._channel.close()
                        self._channel = None
            loop = asyncio.get_running_loop()
            if self._not_started is not None and loop.time() < self._retry_at:
                raise UpstreamError(self._not_started)
            try:
                self._owned = await OwnedUpstream.start(os.dup(self._namespace))
            except SandboxError as exc:  # no nsenter where the sandbox cannot write
                self._give_up(str(exc))
                return None
            except (UpstreamError, OSError) as exc:
                self._not_started = f"the socket minter could not start: {exc}"
                self._retry_at = loop.time() + self._retry_seconds
                log.warning("upstream.minter_not_started", reason=self._not_started)
                raise UpstreamError(self._not_started) from None
            return self._owned  # (the namespace is kept: a broken minter starts again)

    def _give_up(self, reason: str) -> None:
        self._failed = reason
        log.warning("upstream.owned_unavailable", reason=reason)
        if self._namespace is not None:
            os.close(self._namespace)
            self._namespace = None

    async def close(self) -> None:
        async with self._lock:
            if self._channel is not None:
                self._channel.close()
                self._channel = None
            if self._namespace is not None:
                os.close(self._namespace)
                self._namespace = None
            if self._owned is not None:
                await self._owned.close()
