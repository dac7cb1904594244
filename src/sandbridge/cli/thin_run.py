"""``sandbridge run``'s thin client: a run whose session the user's daemon builds.

A full ``sandbridge run`` spends most of its start importing what builds a session
(argument parsing, the policy, git, the mounts, the event loop). With a daemon running,
this client imports the standard library alone: it sends its arguments, working
directory, environment, umask and standard descriptors to the daemon, whose run builder
(``cli/run_builder.py``: the same parser and the same code as the full command, in a
process forked for this client) prints what the run prints at its start and answers with
the sandbox's command line, its descriptors and the request that has the daemon serve
the host half. This client then does what ``session/served.py`` and ``session/run.py``
do in a full ``run``: it has the daemon serve the session (and the next daemon, if that
one goes away), starts the sandbox as its own child, prints the daemon's lines, ends the
sandbox on SIGINT, SIGTERM, SIGHUP or the owner's ``stop``, and gives its status. The
builder checks what the sandbox changed and prints what the run prints at its end while
the daemon closes the session, then removes the session's dirs.

Whatever it cannot do (no daemon, another uid's socket, a daemon of another install or
version, ``--no-daemon``, ``--dry-run``, ``--print-policy``, ``--verbose``), it leaves to
the full command (:func:`run` returns None) before anything was printed.

Of ``socket`` and ``signal`` it imports their C cores (``_socket``, ``_signal``): the
modules around them build enums at import, which cost every run's start more than this
client's own work.
"""

from __future__ import annotations

import _socket
import array
import contextlib
import errno
import fcntl
import os
import resource
import select
import struct
import sys
import time

import sandbridge
from sandbridge import event_line
from sandbridge.cli import app_lines
from sandbridge.exceptions import DaemonError
from sandbridge.protocol import daemon_wire
from sandbridge.protocol.daemon_wire import Event

TYPE_CHECKING = False  # typing's, without importing typing for it
if TYPE_CHECKING:
    import signal as _signal
else:
    import _signal

# The signals that end a run (as session/run.py's), with 128 + their number.
ENDING_SIGNALS = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP)
READY = daemon_wire.READY_TIMEOUT
# The sandbox entry sends its network namespace before its command starts, within its
# own start (relay/host/owned_upstream.py's NAMESPACE_TIMEOUT).
NAMESPACE_WAIT = 10.0
# What the kernel's SO_PEERCRED holds: pid, uid, gid.
_PEERCRED = struct.Struct("3i")


class _LinkError(Exception):
    """The daemon's connection ended or refused; the text says how (as served.py's)."""


def run(argv: list[str]) -> int | None:
    """Carry out ``sandbridge`` ``argv`` (``run ...``) through the daemon; None when the
    full command must (nothing was printed then)."""
    if "--no-daemon" in argv[: argv.index("--") if "--" in argv else len(argv)]:
        return None
    builder = _connect()
    if builder is None:
        return None
    waker = _Waker()  # from here to the end: a signal is never a traceback
    try:
        answer = _ask(builder, argv, waker)
        if answer is None or isinstance(answer, int):
            return answer
        message, fds = answer
        open_fds = set(fds)  # the session closes the sandbox's once the backend has them
        try:
            return _Session(builder, message, fds, waker, open_fds).run()
        finally:
            for fd in open_fds:
                os.close(fd)
    finally:
        waker.close()
        builder.close()


def _connect() -> _socket.socket | None:
    """This user's daemon at the usual place (the full command also looks in fallback
    state roots, and says why it does not use a socket), or None."""
    root = f"{os.environ.get('XDG_RUNTIME_DIR') or '/tmp'}/sandbridge-{os.getuid()}"
    try:
        info = os.lstat(root)
    except OSError:
        return None
    if info.st_uid != os.getuid() or (info.st_mode & 0o170777) != 0o040700:
        return None  # not a private dir of ours: the full command decides
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET | _socket.SOCK_CLOEXEC)
    sock.settimeout(daemon_wire.CONNECT_TIMEOUT)
    try:
        sock.connect(f"{root}/daemon.sock")
        _, uid, _ = _PEERCRED.unpack(
            sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, _PEERCRED.size)
        )
    except OSError:
        sock.close()
        return None
    if uid != os.getuid():
        sock.close()
        return None
    return sock


def _ask(
    builder: _socket.socket, argv: list[str], waker: _Waker
) -> tuple[dict[str, object], list[int]] | int | None:
    """Send the run request; the start (its message and descriptors), the status of a
    run that ended in the builder, or None (the full command must run it)."""
    umask = os.umask(0)
    os.umask(umask)
    try:
        here = os.stat(".")
        request = daemon_wire.run_request(
            {
                "argv": argv,
                "cwd": os.getcwd(),
                "cwd_id": [here.st_dev, here.st_ino],
                "env": dict(os.environ),
                "umask": umask,
                "python": daemon_wire.python_identity(sys.executable, sys.prefix),
                "package": daemon_wire.package_identity(
                    sandbridge.__file__, sandbridge.__version__
                ),
            }
        )
        builder.sendmsg(
            [request], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))]
        )
    except (OSError, DaemonError):
        return None
    # The builder may take as long as the full command's start (git, the policy): no
    # timeout; a signal ends the wait (and the builder sees the connection close).
    try:
        builder.settimeout(None)
        while True:
            readable = _poll([builder.fileno(), waker.fd], None)
            if waker.fd in readable:
                signum = waker.first()
                if signum is not None:
                    return 128 + signum
            if builder.fileno() in readable:
                break
        data, fds = _receive(builder, daemon_wire.MAX_START_FDS)
    except OSError:
        return None
    try:
        kind, value = daemon_wire.decode_event(data)
    except DaemonError:
        kind, value = Event.FALLBACK, None
    if kind is Event.START and isinstance(value, dict):
        return value, fds
    for fd in fds:
        os.close(fd)
    if kind is Event.EXIT and isinstance(value, int):
        return value
    return None  # a fallback, a refusal, an older daemon: the full command says it all


def _receive(sock: _socket.socket, max_fds: int) -> tuple[bytes, list[int]]:
    """One message and its descriptors, close-on-exec (never the sandbox's by accident)."""
    data, ancdata, flags, _ = sock.recvmsg(
        daemon_wire.MAX_MESSAGE_BYTES,
        _socket.CMSG_SPACE(max_fds * 4),
        _socket.MSG_CMSG_CLOEXEC,
    )
    fds = array.array("i")
    for level, kind, payload in ancdata:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if flags & _socket.MSG_CTRUNC:
        for fd in fds:
            os.close(fd)
        raise OSError(errno.EMSGSIZE, "more descriptors than a start carries")
    return data, list(fds)


def _poll(fds: list[int], timeout: float | None) -> set[int]:
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    wait = None if timeout is None else max(0, int(timeout * 1000) + 1)
    return {fd for fd, _ in poller.poll(wait)}


class _Waker:
    """The ending signals, caught and written to a pipe that ``poll`` watches."""

    def __init__(self) -> None:
        self.fd, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._old_wakeup = _signal.set_wakeup_fd(self._write)
        self._old = {signum: _signal.signal(signum, _caught) for signum in ENDING_SIGNALS}

    def first(self) -> int | None:
        try:
            data = os.read(self.fd, 64)
        except BlockingIOError:
            return None
        return data[0] if data else None

    def close(self) -> None:
        for signum, handler in self._old.items():
            _signal.signal(signum, handler)
        _signal.set_wakeup_fd(self._old_wakeup)
        os.close(self.fd)
        os.close(self._write)


def _caught(signum: int, frame: object) -> None:
    """The wakeup descriptor carries the signal; nothing else to do here."""


def _say(text: str) -> None:
    print(f"sandbridge: {text}", file=sys.stderr, flush=True)


class _Session:
    """One started run: the daemon link, the sandbox, the signals, to the end."""

    def __init__(
        self,
        builder: _socket.socket,
        start: dict[str, object],
        fds: list[int],
        waker: _Waker,
        open_fds: set[int],
    ) -> None:
        self.builder = builder
        self.waker = waker
        self.open_fds = open_fds
        self.argv = [str(word) for word in start["argv"]]  # type: ignore[attr-defined]
        targets = [int(fd) for fd in start["fds"]]  # type: ignore[attr-defined]
        self.serve = dict(start["serve"])  # type: ignore[call-overload]
        self.request = daemon_wire.encode(self.serve)
        # The serve request's, the sandbox's, the start gate's writer and (from a builder
        # that says so) the namespace channel's host end, in that order.
        self.namespace_channel = fds.pop() if start.get(daemon_wire.NAMESPACE_KEY) else None
        serving = len(fds) - len(targets) - 1
        self.serve_fds = array.array("i", fds[:serving])
        self.sandbox_fds = list(zip(fds[serving:-1], targets, strict=True))
        self.start_writer = fds[-1]
        self.link: _socket.socket | None = None
        self.stopped = False
        self.received: list[int] = []
        # While the daemon is away: when to look for one again; while a new one is
        # asked to serve: the deadline, whether it reset the connection once, and the
        # last refusal said.
        self.next_try: float | None = None
        self.opening: float | None = None
        self.reset = False
        self.refusal: str | None = None

    def run(self) -> int:
        # The sandbox starts while the daemon serves the session; its command waits at
        # the start gate until the session is served (docs/daemon.md).
        pid, pidfd = self._spawn()
        self._take_namespace()
        try:
            session_id = self._open_first()
        except _LinkError as exc:
            _end(pid, pidfd)
            self._tell_done(2)
            self._finish()
            _say(str(exc))
            return 2
        print(app_lines.session(session_id), file=sys.stderr, flush=True)
        signum = self.waker.first()  # one that came while the daemon was asked
        if signum is not None:
            self.received.append(signum)
        if not self.received and not self.stopped:
            with contextlib.suppress(OSError):  # the sandbox ended already: its status says
                os.write(self.start_writer, b"s")
        status = self._until_exit(pid, pidfd)
        if self.stopped and not self.received:
            _say(daemon_wire.owner_stopped(session_id))
        # The builder checks what the sandbox changed while the daemon closes the session.
        self._tell_done(status)
        self._close_link()
        self._finish()
        return status

    def _take_namespace(self) -> None:
        """Add the network namespace the sandbox entry sends (before its command starts)
        to the serve request, sent with it to every daemon that serves the session: the
        daemon makes the app connections in it (relay/host/owned_upstream.py; it checks the
        descriptor). Without one, the daemon's session takes the shim's handoff."""
        fd = self.namespace_channel
        if fd is None:
            return
        self.namespace_channel = None
        self.open_fds.discard(fd)
        why = f"the sandbox entry sent no network namespace in {NAMESPACE_WAIT:g} s"
        channel = _socket.socket(fileno=fd)
        try:
            readable = _poll([fd, self.waker.fd], NAMESPACE_WAIT)
            if fd in readable:
                _, fds = _receive(channel, 4)
                if len(fds) == 1:
                    self.open_fds.add(fds[0])  # closed at the run's end
                    self.serve_fds.append(fds[0])
                    self.serve[daemon_wire.NAMESPACE_KEY] = True
                    self.request = daemon_wire.encode(self.serve)
                    return
                for extra in fds:
                    os.close(extra)
                why = f"the sandbox entry sent {len(fds)} namespace descriptors, not 1"
            elif self.waker.fd in readable:
                why = "a signal came first"
        except OSError as exc:
            why = f"the sandbox entry's network namespace is unusable: {exc.strerror}"
        finally:
            channel.close()
        event_line.warn("upstream.owned_unavailable", reason=why)

    # The daemon link -------------------------------------------------------------

    def _open_first(self) -> str:
        sock = _connect()
        if sock is None:
            raise _LinkError(daemon_wire.CLOSED)
        return self._open(sock, time.monotonic() + daemon_wire.READY_TIMEOUT)

    def _open(self, sock: _socket.socket, deadline: float) -> str:
        """Send the serve request on ``sock``; the session's id once it is served."""
        self.link = sock
        self._send_request()
        reset = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not _poll([sock.fileno()], remaining):
                raise _LinkError(daemon_wire.NOT_READY)
            try:
                kind, value = self._event()
            except ConnectionResetError:
                # A daemon that closed with our request unread: the reset comes first,
                # once; what it sent before follows.
                if reset:
                    raise _LinkError(f"{daemon_wire.CLOSED} (Connection reset by peer)") from None
                reset = True
                continue
            except OSError as exc:
                raise _LinkError(f"{daemon_wire.CLOSED} ({exc.strerror})") from None
            if kind is Event.READY:
                return str(value)

    def _send_request(self) -> None:
        assert self.link is not None
        rights = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, self.serve_fds)]
        with contextlib.suppress(OSError):  # refused before it was read: the answer waits
            self.link.sendmsg([self.request], rights)

    def _event(self) -> tuple[Event, object]:
        """Read one event from the link and act on it; the daemon leaving raises."""
        assert self.link is not None
        data = self.link.recv(daemon_wire.MAX_MESSAGE_BYTES)
        if not data:
            raise _LinkError(daemon_wire.CLOSED)
        try:
            kind, value = daemon_wire.decode_event(data)
        except DaemonError as exc:
            raise _LinkError(str(exc)) from None
        try:
            if kind is Event.ERROR:
                raise _LinkError(daemon_wire.refused(value))
            if kind is Event.SAY:
                print(value, file=sys.stderr, flush=True)
            elif kind in (Event.APP, Event.GONE):
                lines = app_lines.registered if kind is Event.APP else app_lines.gone
                for line in lines(value):  # type: ignore[arg-type]
                    print(line, file=sys.stderr, flush=True)
            elif kind is Event.STOP:
                self.stopped = True
        except (KeyError, TypeError) as exc:
            raise _LinkError(f"an app event is malformed: {exc}") from None
        return kind, value

    def _close_link(self) -> None:
        """Leave, and wait until the daemon has closed the session's listeners."""
        if self.link is None:
            return
        deadline = time.monotonic() + daemon_wire.CLOSE_TIMEOUT
        try:
            self.link.shutdown(_socket.SHUT_WR)
            while (remaining := deadline - time.monotonic()) > 0:
                if not _poll([self.link.fileno()], remaining) or not self.link.recv(
                    daemon_wire.MAX_MESSAGE_BYTES
                ):
                    break
        except OSError:
            pass
        self.link.close()
        self.link = None

    # The sandbox -----------------------------------------------------------------

    def _spawn(self) -> tuple[int, int]:
        """Start the backend with the sandbox's descriptors at the numbers its command
        line names (and no other of this process's); its pid and pidfd."""
        _raise_descriptor_limit()
        # As the full command: no core file of the sandbox's environment by default.
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd > 2:
                with contextlib.suppress(OSError):  # the listing's own, closed by now
                    os.set_inheritable(fd, False)
        # Moved above every target first, so that no move overwrites another's source.
        floor = max([target for _, target in self.sandbox_fds], default=2) + 1
        moved = [
            (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor), target)
            for fd, target in self.sandbox_fds
        ]
        try:
            pid = os.posix_spawnp(
                self.argv[0],
                self.argv,
                os.environ,
                file_actions=[(os.POSIX_SPAWN_DUP2, fd, target) for fd, target in moved],
                setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ, *ENDING_SIGNALS),
            )
        finally:
            for fd, _ in moved:
                os.close(fd)
        # The backend has its own: the sandbox's end of the terminal channel must close
        # with the sandbox (the daemon's end then sees it), as in a full run.
        for fd, _ in self.sandbox_fds:
            os.close(fd)
            self.open_fds.discard(fd)
        return pid, os.pidfd_open(pid)

    def _until_exit(self, pid: int, pidfd: int) -> int:
        waker = self.waker
        killed = False
        try:
            while True:
                if (self.received or self.stopped) and not killed:
                    # Killing the backend ends the sandbox (--die-with-parent, --kill-child).
                    os.kill(pid, _signal.SIGKILL)
                    killed = True
                watched = [pidfd, waker.fd] + ([] if self.link is None else [self.link.fileno()])
                wake = self.next_try if self.opening is None else self.opening
                readable = _poll(watched, None if wake is None else wake - time.monotonic())
                if pidfd in readable:
                    _, wait_status = os.waitpid(pid, 0)
                    break
                if waker.fd in readable:
                    signum = waker.first()
                    if signum is not None:
                        self.received.append(signum)
                else:
                    self._tend_link(readable)
        finally:
            os.close(pidfd)
        return self._status(wait_status)

    def _status(self, wait_status: int) -> int:
        """The sandbox's exit status, or 128 + the signal that stopped the session first
        (the owner's ``stop`` counts as SIGTERM), as session/run.py's."""
        if self.received:
            return 128 + self.received[0]
        if self.stopped:
            return 128 + _signal.SIGTERM
        status = os.waitstatus_to_exitcode(wait_status)
        return 128 - status if status < 0 else status

    def _tend_link(self, readable: set[int]) -> None:
        """An event, a deadline or the time to look for a daemon again, as served.py's
        ``follow`` acts on them."""
        now = time.monotonic()
        try:
            if self.link is not None and self.link.fileno() in readable:
                try:
                    kind, _ = self._event()
                except ConnectionResetError:
                    # Refused at once, our request unread: the refusal follows, once.
                    if self.opening is None or self.reset:
                        raise
                    self.reset = True
                    return
                if self.opening is not None and kind is Event.READY:
                    self.opening = None
                    _say(daemon_wire.SERVES_AGAIN)
            elif self.opening is not None and now >= self.opening:
                raise _LinkError(daemon_wire.NOT_READY)
            elif self.next_try is not None and now >= self.next_try:
                self.next_try = now + daemon_wire.RECONNECT_INTERVAL
                sock = _connect()
                if sock is not None:
                    self.next_try, self.opening, self.reset = None, now + READY, False
                    self.link = sock
                    self._send_request()
        except (_LinkError, OSError) as exc:
            self._lost(exc)

    def _lost(self, exc: Exception) -> None:
        """The link ended (or a new daemon would not serve): say so, look again soon."""
        if isinstance(exc, _LinkError):
            why = str(exc)
        elif self.opening is not None:
            why = f"{daemon_wire.CLOSED} ({getattr(exc, 'strerror', exc)})"
        else:
            why = str(exc)
        if self.opening is None:
            _say(daemon_wire.stopped_serving(why))
        elif why != self.refusal:  # once, not every interval
            self.refusal = why
            _say(daemon_wire.cannot_serve_yet(why))
        if self.link is not None:
            self.link.close()
            self.link = None
        self.opening = None
        self.next_try = time.monotonic() + daemon_wire.RECONNECT_INTERVAL

    # The end ---------------------------------------------------------------------

    def _tell_done(self, status: int) -> None:
        """Tell the builder the run ended, with its status, as the sandbox ends: it checks
        what the sandbox changed and prints what the run prints at its end meanwhile."""
        try:
            self.builder.settimeout(daemon_wire.CLOSE_TIMEOUT)
            self.builder.send(daemon_wire.event(Event.DONE, status))
        except OSError:
            pass  # the builder is gone: the dirs are the next listing's to sweep

    def _finish(self) -> None:
        """Shut down this side once the daemon has closed the session: the builder then
        removes the session's dirs, and answers; wait for that."""
        try:
            self.builder.shutdown(_socket.SHUT_WR)
            self.builder.recv(daemon_wire.MAX_MESSAGE_BYTES)
        except OSError:
            pass  # the builder is gone: the dirs are the next listing's to sweep


def _end(pid: int, pidfd: int) -> None:
    """Kill the backend (its sandbox's command never started) and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, _signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(pidfd)


def _raise_descriptor_limit() -> None:
    """As the full command: the hard limit of open files (the sandbox inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
