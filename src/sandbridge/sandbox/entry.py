"""The sandbox's first process: bind the shim's listener, install the helpers, start the
command, then serve the shim (and the gate ports, terminal starts, publishing) until
the command ends.

The shim's listener (and in allow mode every gate port) is bound and listening before
the command starts, so a connection the command causes at once waits in the listener's
queue; the helpers are on disk before it starts. Then, while the command runs, this
process serves the shim's common case, the gate ports and terminal starts without an
event loop (:mod:`sandbridge.relay.inside.light_shim`: the host's handoffs, refusals of bad
first lines; :mod:`sandbridge.egress.light_gate`: every gate connection bridged to the
host's egress gate; :mod:`sandbridge.terminals.light_starter`: a PTY worker per start
the host asks for; :mod:`sandbridge.relay.inside.publish` and
:mod:`sandbridge.relay.inside.auto_publish`: ``--publish``), and imports what needs one
(:mod:`sandbridge.sandbox.services`: asyncio, the shim's other cases) only when something
does. Until the command runs it imports the standard library's ``os``, ``select`` and
the C cores of ``socket`` and ``signal`` (``_socket``, ``_signal``: the modules around
them build enums that cost every start more than the entry's own work; not even
pathlib, re or contextlib; ``ctypes``, ``struct`` and ``termios`` for its own hardening:
non-dumpable, no TIOCSTI) and nothing that needs an event loop. The first thing it does
is send the sandbox's network namespace (a run the daemon serves waits for it before it
asks the daemon to serve): the rest of its start goes on while the daemon serves.

The command's exit status becomes this process's (128 + N for a signal), which the
runner passes on to the user. When this process ends, the PID namespace ends with it:
every daemon the command left behind is killed by the kernel.
"""

from __future__ import annotations

import _socket
import os
import select
import struct
import sys

from sandbridge.aio.before_loop import bind_unix_listener, keep_inherited_descriptors, reap
from sandbridge.protocol.contract import CLIPBOARD_SOCKET, EGRESS_SOCKET
from sandbridge.sandbox.commands import (
    install_app_settings,
    install_clipboard_commands,
    install_commands,
    install_helper,
)
from sandbridge.sandbox.terminal_injection import forbid_terminal_injection

# The type checker's alone: importing typing costs the command's start more than the
# rest of this module.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
    import socket

    from sandbridge.aio.poll_loop import PollLoop
    from sandbridge.egress.light_gate import LightGate
    from sandbridge.protocol.publish_rules import PublishRule
    from sandbridge.relay.inside.auto_publish import AutoPublisher
    from sandbridge.relay.inside.light_shim import LightShim
    from sandbridge.relay.inside.publish import PortPublisher
    from sandbridge.terminals.light_starter import LightStarter
else:
    import _signal

# Connections waiting on a gate port before the gate listener accepts them (asyncio's
# start_server listens with this backlog too).
GATE_BACKLOG = 100
# What the standard library's subprocess resets for a child (Python ignores SIGPIPE and
# SIGXFSZ for itself; a command expects the default).
_RESTORED_SIGNALS = (_signal.SIGPIPE, _signal.SIGXFSZ)


# prctl(2)'s option (linux/prctl.h); the standard library has no prctl.
_PR_SET_DUMPABLE = 4


def _undumpable() -> None:
    """Make this process non-dumpable: the command runs as the same uid in the same
    namespaces, and could otherwise take this process's descriptors (the shim's and the
    gate's listeners, the host's terminal channel) with pidfd_getfd(2), or its memory
    with ptrace(2) or /proc/PID/mem. The command's own exec makes it dumpable again."""
    import ctypes  # only here: the command's start waits for none of its other users

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE)")


def _send_namespace(fd: int) -> None:
    """Send the host this sandbox's network namespace on the socket ``fd``, and close it:
    before the command starts, so what the host gets is the entry's own. The host makes
    its app connections from sockets in it (relay/host/owned_upstream.py); if this fails, the
    host sees the socket closed and takes the shim's handoff instead."""
    channel = _socket.socket(fileno=fd)
    try:
        namespace = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        channel.close()
        print(f"sandbridge: cannot open the network namespace: {exc}", file=sys.stderr)
        return
    try:
        rights = struct.pack("i", namespace)
        channel.sendmsg([b"n"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
    except OSError as exc:
        print(f"sandbridge: cannot send the network namespace: {exc}", file=sys.stderr)
    finally:
        os.close(namespace)
        channel.close()


def bind_gate_port(address: str, port: int) -> _socket.socket:
    """A listening TCP socket on the gate address (IPv4), as the gate listener serves it
    (the ``socket`` module's C core's: :func:`_full_socket` makes it the module's)."""
    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(GATE_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _full_socket(sock: _socket.socket) -> socket.socket:
    """``sock`` as a ``socket.socket`` (what the light shim, the gate and the event loop
    take), non-blocking as the entry made it; ``sock`` is left without its descriptor."""
    import socket

    full = socket.socket(fileno=sock.detach())
    full.setblocking(False)
    return full


class _Command:
    """The user's command, started without an event loop; SIGTERM reaches it, SIGINT
    (which reaches it through the terminal's process group) does not end this process,
    which must outlive it."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self._terminate = False
        self._reaped = False
        _signal.signal(_signal.SIGINT, lambda _signum, _frame: None)
        _signal.signal(_signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, _signum: int, _frame: object) -> None:
        if self._reaped:  # its pid may be another process's by now
            return
        if self.pid is None:
            self._terminate = True  # passed on as soon as the command runs
        else:
            try:  # noqa: SIM105 (contextlib would cost the start: the module's docstring)
                os.kill(self.pid, _signal.SIGTERM)
            except ProcessLookupError:
                pass

    def start(self, argv: list[str]) -> int:
        # Handled signals (SIGINT, SIGTERM) are reset at exec; ignored ones are not.
        self.pid = os.posix_spawnp(argv[0], argv, os.environ, setsigdef=_RESTORED_SIGNALS)
        if self._terminate:
            os.kill(self.pid, _signal.SIGTERM)
        return self.pid

    def reap(self) -> int:
        """Its exit status, once it has ended (SIGTERM is no longer passed on)."""
        assert self.pid is not None
        self._reaped = True  # first: the pid stays the command's until reaped
        return reap(self.pid)


class _Publishing:
    """What the entry publishes: ``--publish PORT[:/base]`` values and the owner's
    auto-publish rules (``--publish-rule``), parsed before the command starts."""

    def __init__(self, ports: list[tuple[int, str]], rules: list[PublishRule]) -> None:
        self.ports = ports
        self.rules = rules

    def __bool__(self) -> bool:
        return bool(self.ports or self.rules)


def _parse_publishing(publish: list[str], publish_rules: list[str]) -> _Publishing:
    """The entry's ``--publish`` and ``--publish-rule`` values; a bad one raises
    ``ValueError`` naming it."""
    if not publish and not publish_rules:
        return _Publishing([], [])
    from sandbridge.exceptions import PolicyError
    from sandbridge.protocol.publish_rules import parse_rule_option
    from sandbridge.relay.inside.publish import parse_publish

    try:
        rules = [parse_rule_option(value) for value in publish_rules]
    except PolicyError as exc:
        raise ValueError(str(exc)) from None
    return _Publishing([parse_publish(value) for value in publish], rules)


def _start_publishing(
    loop: PollLoop, publishing: _Publishing
) -> list[PortPublisher | AutoPublisher]:
    """Start publishing on ``loop``: a publisher per ``--publish PORT``, and
    auto-publish if the rules publish anything."""
    from sandbridge.protocol.contract import DEFAULT_RELAY_SOCKET, RELAY_SOCKET_ENV
    from sandbridge.protocol.publish_rules import publishes_any
    from sandbridge.relay.inside.publish import PortPublisher

    socket_path = os.environ.get(RELAY_SOCKET_ENV, DEFAULT_RELAY_SOCKET)
    publishers: list[PortPublisher | AutoPublisher] = [
        PortPublisher(loop, port, base, socket_path) for port, base in publishing.ports
    ]
    if publishes_any(publishing.rules):
        from sandbridge.relay.inside.auto_publish import AutoPublisher

        # A port published by --publish PORT is not published a second time.
        exclude = {port for port, _ in publishing.ports}
        publishers.append(AutoPublisher(loop, publishing.rules, socket_path, exclude))
    for publisher in publishers:
        publisher.start()
    return publishers


class _Light:
    """What served without an event loop: the listeners (as ``socket.socket``), the loop,
    the light shim, the light gate, the terminal starter, the publishers."""

    def __init__(  # noqa: PLR0913  (what served: the parts the event loop takes over)
        self,
        listeners: tuple[socket.socket, dict[int, socket.socket]],
        loop: PollLoop,
        shim: LightShim,
        gate: LightGate | None,
        starter: LightStarter | None,
        publishers: list[PortPublisher | AutoPublisher],
    ) -> None:
        self.upstream, self.gate_ports = listeners
        self.loop = loop
        self.shim = shim
        self.gate = gate
        self.starter = starter
        self.publishers = publishers


class _Serving:
    """What the entry serves beside the command: the shim's listener (``upstream``), the
    gate ports and the host's egress socket they bridge to, the terminal channel, and
    what it publishes."""

    def __init__(
        self,
        upstream: _socket.socket,
        gate_ports: dict[int, _socket.socket],
        egress_socket: str,
        terminal_fd: int | None,
        publishing: _Publishing,
    ) -> None:
        self.upstream = upstream
        self.gate_ports = gate_ports
        self.egress_socket = egress_socket
        self.terminal_fd = terminal_fd
        self.publishing = publishing


def _until_needed(command: _Command, serving: _Serving) -> int | _Light:
    """Serve the shim, the gate and terminal starts without an event loop for as long as
    they can be: until the command ends (return its exit status) or something needs the
    event loop (return what served, whose open connections the event loop goes on
    serving).

    Until the first connection this process only sleeps: a session nobody connects to
    costs one small process (publishing starts at once: it looks for the app's port
    from the command's start). A connection on ``upstream``, a gate port or the terminal
    channel starts the light shim (:mod:`sandbridge.relay.inside.light_shim`, handoffs and
    refusals), the light gate (:mod:`sandbridge.egress.light_gate`) and the terminal
    starter (:mod:`sandbridge.terminals.light_starter`); a connection the light shim
    passes on is the event loop's, and waits while that loads."""
    assert command.pid is not None
    pidfd = os.pidfd_open(command.pid)
    try:
        poller = select.poll()
        gate_ports = serving.gate_ports.values()
        listeners = [serving.upstream.fileno(), *(sock.fileno() for sock in gate_ports)]
        if serving.terminal_fd is not None:
            listeners.append(serving.terminal_fd)
        for fd in (pidfd, *listeners):
            poller.register(fd, select.POLLIN)
        ready = {fd for fd, _ in poller.poll(0 if serving.publishing else None)}
        if pidfd not in ready:
            light = _serve_light(pidfd, serving)
            if light is not None:
                return light
    finally:
        os.close(pidfd)
    return command.reap()


def _serve_light(pidfd: int, serving: _Serving) -> _Light | None:
    """Run the light shim, gate, terminal starter and publishers until the command
    ends (return None) or something needs the event loop (return them)."""
    # Only now: an idle session never pays for these.
    from sandbridge.aio.poll_loop import PollLoop
    from sandbridge.relay.inside.light_shim import LightShim

    upstream = _full_socket(serving.upstream)
    gate_ports = {port: _full_socket(sock) for port, sock in serving.gate_ports.items()}
    loop = PollLoop()
    exited: list[bool] = []

    def on_exit() -> None:
        exited.append(True)
        loop.stop()

    light = LightShim(upstream, loop, needs_loop=loop.stop)
    gate = None
    if gate_ports:
        from sandbridge.egress.light_gate import LightGate

        gate = LightGate(loop, gate_ports, serving.egress_socket)
        gate.start()
    starter = None
    if serving.terminal_fd is not None:
        from sandbridge.terminals.light_starter import LightStarter

        starter = LightStarter(loop, serving.terminal_fd)
        starter.start()
    publishing = serving.publishing
    publishers = _start_publishing(loop, publishing) if publishing else []
    loop.add_reader(pidfd, on_exit)
    light.start()
    loop.run()
    loop.remove_reader(pidfd)
    if exited:
        light.close()
        if gate is not None:
            gate.close()
        if starter is not None:
            starter.close()
        for publisher in publishers:
            publisher.close()
        return None
    return _Light((upstream, gate_ports), loop, light, gate, starter, publishers)


def _allowed_to_start(fd: int) -> bool:
    """Wait until the host says the command may start (one byte on ``fd``, a pipe that
    is closed then, and close-on-exec already); False if it closed the pipe without."""
    try:
        return os.read(fd, 1) != b""
    finally:
        os.close(fd)


class _Options:
    """The entry's command line, as the host writes it (``SandboxSpec.entry_argv``):
    ``--upstream-socket PATH [--gate ADDR] [--gate-port N]... [--publish V]...
    [--publish-rule V]... [--terminal-fd N] [--start-fd N] [--namespace-fd N] -- CMD...``.
    Parsed by hand: argparse costs the command's start more than all the rest of this module."""

    def __init__(self, argv: list[str]) -> None:
        self.upstream_socket: str | None = None
        self.gate: str | None = None
        self.gate_port: list[int] = []
        self.publish: list[str] = []
        self.publish_rule: list[str] = []
        self.terminal_fd: int | None = None
        self.start_fd: int | None = None
        self.namespace_fd: int | None = None
        self.command: list[str] = []
        words = iter(argv)
        for word in words:
            if word == "--" or not word.startswith("--"):
                self.command = list(words) if word == "--" else [word, *words]
                break
            name, equals, value = word.partition("=")
            if not equals:
                following = next(words, None)
                if following is None:
                    raise ValueError(f"argument {name}: expected one argument")
                value = following
            self._set(name, value)

    def _set(self, name: str, value: str) -> None:
        if name == "--upstream-socket":
            self.upstream_socket = value
        elif name == "--gate":
            self.gate = value
        elif name == "--gate-port":
            self.gate_port.append(_number(name, value))
        elif name == "--publish":
            self.publish.append(value)
        elif name == "--publish-rule":
            self.publish_rule.append(value)
        elif name == "--terminal-fd":
            self.terminal_fd = _number(name, value)
        elif name == "--start-fd":
            self.start_fd = _number(name, value)
        elif name == "--namespace-fd":
            self.namespace_fd = _number(name, value)
        else:
            raise ValueError(f"unrecognized argument: {name}")


def _number(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"argument {name}: invalid int value: {value!r}") from None


def _checked(argv: list[str]) -> tuple[_Options, str]:
    options = _Options(argv)
    if options.upstream_socket is None:
        raise ValueError("the following arguments are required: --upstream-socket")
    if not options.command:
        raise ValueError("no command given")
    return options, options.upstream_socket


def main(argv: list[str] | None = None) -> int:
    try:
        args, upstream_path = _checked(sys.argv[1:] if argv is None else argv)
        # Refused before the command starts.
        publishing = _parse_publishing(args.publish, args.publish_rule)
    except ValueError as exc:
        print(f"sandbridge-sandbox-entry: error: {exc}", file=sys.stderr)
        return 2
    command = args.command
    if args.namespace_fd is not None:
        # First: a run the daemon serves waits for it before it asks the daemon to serve,
        # and the rest of this start goes on meanwhile. Before _undumpable, which takes
        # ctypes' import: no process of the sandbox but this one exists yet to take the
        # namespace's descriptor (open here only for the send), nor any other.
        _send_namespace(args.namespace_fd)
    _undumpable()  # before any descriptor worth taking exists
    forbid_terminal_injection(os.uname().machine)
    install_helper(os.environ.get("HOME", "/tmp"))
    install_commands()
    if os.path.exists(os.path.join(os.path.dirname(upstream_path), CLIPBOARD_SOCKET)):
        install_clipboard_commands()  # the owner turned the bridge on (docs/clipboard.md)
    install_app_settings()
    try:  # noqa: SIM105 (contextlib would cost the start: the module's docstring)
        os.unlink(upstream_path)
    except FileNotFoundError:
        pass
    upstream = bind_unix_listener(upstream_path)
    gate = args.gate
    gate_ports = {port: bind_gate_port(gate, port) for port in args.gate_port if gate}
    if args.terminal_fd is not None:  # never inherited by the command
        os.set_inheritable(args.terminal_fd, False)
    keep_inherited_descriptors()
    if args.start_fd is not None and not _allowed_to_start(args.start_fd):
        return 1  # the host ended the run before its command could start
    command_process = _Command()
    try:
        pid = command_process.start(command)
    except OSError as exc:
        print(f"sandbridge: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    egress_socket = os.path.join(os.path.dirname(upstream_path), EGRESS_SOCKET)
    serving = _Serving(upstream, gate_ports, egress_socket, args.terminal_fd, publishing)
    light = _until_needed(command_process, serving)
    if isinstance(light, int):
        return light
    from pathlib import Path

    from sandbridge.sandbox.services import Services, serve

    return serve(
        pid,
        Services(
            upstream=light.upstream,
            upstream_path=Path(upstream_path),
            gate_ports=light.gate_ports,
            egress_socket=Path(egress_socket),
            terminal_fd=args.terminal_fd,
            poll_loop=light.loop,
            light_shim=light.shim,
            light_gate=light.gate,
            light_starter=light.starter,
            publishers=light.publishers,
        ),
    )


def run() -> None:
    """The entry's process (``SandboxSpec.entry_argv``): :func:`main`, then out without
    the interpreter's teardown of every module the shim imported: the session's end
    waits for this process, and nothing is left to close but what the kernel closes
    anyway (the services closed their listeners above)."""
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    run()
