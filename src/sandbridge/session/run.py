"""``sandbridge run``: one session from start to teardown.

Order matters: the runtime dir and ``relay.sock`` exist before the sandbox starts, the
shim is listening before the command starts (the sandbox entry sees to that), and on
any end (command exit, SIGINT, SIGTERM) the sandbox is killed, every listener closed
and the runtime dir removed before this function returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

from sandbridge import log
from sandbridge.aio.tasks import first_done, running
from sandbridge.places import known_projects
from sandbridge.places.registry import SessionEntry
from sandbridge.places.runtime_dir import RuntimeDir
from sandbridge.protocol.daemon_wire import owner_stopped
from sandbridge.sandbox.backend import sandbox_argv, setup_payload
from sandbridge.sandbox.spec import SandboxSpec, setup_file
from sandbridge.session.options import SessionOptions
from sandbridge.session.served import served_session


async def run_session(  # noqa: PLR0913  (keyword-only: where and how it is served)
    spec_factory: Callable[[Path], SandboxSpec],
    backend: str,
    options: SessionOptions,
    *,
    runtime_path: Path | None = None,
    on_session: Callable[[SessionEntry], None] | None = None,
    daemon: socket.socket | None = None,
) -> int:
    """Run one sandbox session as ``options`` say (its workdir is the spec's); return the
    exit status. With ``daemon`` (a connection to the user's daemon) the daemon serves
    the host half; the sandbox is this process's either way."""
    with prepared_sandbox(
        spec_factory,
        backend,
        options,
        runtime_path=runtime_path,
        own_upstream=True,
        start_gate=daemon is not None,
    ) as prepared:
        if daemon is not None:
            return await _run_served(daemon, prepared, backend, on_session)
        async with host_half(None, prepared.runtime_dir, prepared.options) as (entry, stop):
            if on_session is not None:
                on_session(entry)
            log.debug("sandbox.start", backend=backend, runtime_dir=str(prepared.runtime_dir.path))
            process = await asyncio.create_subprocess_exec(
                *prepared.argv, pass_fds=prepared.pass_fds
            )
            prepared.release_sandbox_fds()  # the backend has its own copies
            return await _until_exit_or_signal(process, stop, entry.id)


async def _run_served(
    daemon: socket.socket,
    prepared: PreparedSandbox,
    backend: str,
    on_session: Callable[[SessionEntry], None] | None,
) -> int:
    """A run whose host half the daemon serves. The sandbox starts first and its command
    waits at the start gate; the entry sends its network namespace before that, and the
    daemon gets it with the request (again after a restart: relay/host/owned_upstream.py), then
    the command starts. The entry sends it first thing, so what it does next (its sockets,
    its helpers) overlaps the serving, as in a thin client's run (cli/thin_run.py does the
    same)."""
    assert prepared.start_writer is not None and prepared.options.namespace_channel is not None
    log.debug("sandbox.start", backend=backend, runtime_dir=str(prepared.runtime_dir.path))
    namespace: int | None = None
    process = await asyncio.create_subprocess_exec(*prepared.argv, pass_fds=prepared.pass_fds)
    start_writer = os.dup(prepared.start_writer)
    try:
        prepared.release_sandbox_fds()  # the backend has its own copies
        namespace = await _entry_namespace(prepared.options.namespace_channel)
        options = dataclasses.replace(
            prepared.options, namespace_channel=None, network_namespace=namespace
        )
        stop = asyncio.Event()
        async with served_session(daemon, prepared.runtime_dir, options, stop) as entry:
            if on_session is not None:
                on_session(entry)
            with contextlib.suppress(OSError):  # the sandbox ended already: its status says
                os.write(start_writer, b"s")
            return await _until_exit_or_signal(process, stop, entry.id)
    except BaseException:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        raise
    finally:
        os.close(start_writer)
        if namespace is not None:
            os.close(namespace)


async def _entry_namespace(channel: socket.socket) -> int | None:
    """The network namespace the sandbox entry sends on ``channel`` before its command
    starts (checked: one descriptor, a network namespace), or None, said, where it sends
    none: the daemon's session then takes the shim's handoff."""
    # Only here: a run served here imports the host half anyway, a served one this alone.
    from sandbridge.exceptions import UpstreamError
    from sandbridge.relay.host.owned_upstream import receive_namespace

    channel.setblocking(False)
    try:
        return await receive_namespace(channel)
    except UpstreamError as exc:
        log.warning("upstream.owned_unavailable", reason=str(exc))
        return None
    finally:
        channel.close()


@dataclasses.dataclass
class PreparedSandbox:
    """A session's runtime dir, its options for the host half, and the backend's
    command line with the descriptors it names (the set-up's memfd, the terminal
    channel's sandbox end, and with a start gate the pipe the entry waits on), ready to
    start; :attr:`start_writer`: the gate's end that lets the command start."""

    runtime_dir: RuntimeDir
    options: SessionOptions
    argv: list[str]
    pass_fds: tuple[int, ...]
    start_writer: int | None
    _sandbox_fds: contextlib.ExitStack

    def release_sandbox_fds(self) -> None:
        """Close this process's copies of :attr:`pass_fds` and :attr:`start_writer`
        (once the backend, and whoever opens the gate, have their own)."""
        self._sandbox_fds.close()


@contextlib.contextmanager
def prepared_sandbox(  # noqa: PLR0913  (keyword-only: where, whose, and how it starts)
    spec_factory: Callable[[Path], SandboxSpec],
    backend: str,
    options: SessionOptions,
    *,
    runtime_path: Path | None = None,
    pid: int | None = None,
    start_gate: bool = False,
    own_upstream: bool = False,
) -> Iterator[PreparedSandbox]:
    """Make the runtime dir (of process ``pid``, default this one), the terminal channel
    and the set-up's memfd (and with ``start_gate`` the pipe whose first byte lets
    the command start: ``SandboxSpec.start_fd``; with ``own_upstream`` the socket pair on
    which the entry sends its network namespace: ``SandboxSpec.namespace_fd``), for the
    block's length; the runtime dir is removed if the rest cannot be made."""
    runtime_dir = RuntimeDir.create(runtime_path, pid)
    # The host's private channel to the sandbox entry, for starting terminal workers: an
    # inherited descriptor, never a path in the runtime dir (docs/terminals.md).
    host_end, sandbox_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    namespace_host, namespace_sandbox = (
        socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) if own_upstream else (None, None)
    )
    with (
        host_end,
        sandbox_end,
        contextlib.ExitStack() as sandbox_fds,
        contextlib.ExitStack() as own,
    ):
        sandbox_fds.callback(sandbox_end.close)
        inherited = [sandbox_end.fileno()]
        if namespace_host is not None and namespace_sandbox is not None:
            own.callback(namespace_host.close)  # the host half's, unless it never took it
            sandbox_fds.callback(namespace_sandbox.close)
            inherited.append(namespace_sandbox.fileno())
        try:
            spec = spec_factory(runtime_dir.path)
            spec = dataclasses.replace(
                spec,
                terminal_fd=sandbox_end.fileno(),
                namespace_fd=None if namespace_sandbox is None else namespace_sandbox.fileno(),
                # Asked again as late as can be: a project removed since the list was
                # read would fail the backend's mount (docs/runner.md).
                other_projects=known_projects.present(spec.other_projects),
            )
            gate: tuple[int, ...] = ()
            start_writer = None
            if start_gate:
                start_reader, start_writer = os.pipe2(os.O_CLOEXEC)
                sandbox_fds.callback(os.close, start_reader)
                sandbox_fds.callback(os.close, start_writer)
                spec = dataclasses.replace(spec, start_fd=start_reader)
                gate = (start_reader,)
            # The set-up (the environment's values, secrets among them, and every path the
            # sandbox mounts) on a descriptor, never on a command line; made last, from
            # the spec as it starts.
            setup_fd = setup_file(setup_payload(backend, spec))
            sandbox_fds.callback(os.close, setup_fd)
            spec = dataclasses.replace(spec, setup_fd=setup_fd)
            argv = sandbox_argv(backend, spec)
        except BaseException:
            runtime_dir.remove()
            raise
        yield PreparedSandbox(
            runtime_dir,
            dataclasses.replace(
                options,
                workdir=spec.workdir,
                terminal_channel=host_end,
                namespace_channel=namespace_host,
                command=tuple(spec.command),
            ),
            argv,
            (*inherited, setup_fd, *gate),
            start_writer,
            sandbox_fds,
        )


@asynccontextmanager
async def host_half(
    daemon: socket.socket | None, runtime_dir: RuntimeDir, options: SessionOptions
) -> AsyncIterator[tuple[SessionEntry, asyncio.Event]]:
    """The session's host half, served here or by the daemon, for the block's length;
    with the event the owner's ``stop`` (control socket, dashboard) sets."""
    if daemon is None:
        # Only here: the host halves' modules are a daemon-served run's to skip.
        from sandbridge.session.lifecycle import open_session

        async with open_session(runtime_dir, options) as session:
            yield session.entry, session.stop_requested
    else:
        stop = asyncio.Event()
        async with served_session(daemon, runtime_dir, options, stop) as entry:
            yield entry, stop


async def _until_exit_or_signal(
    process: asyncio.subprocess.Process, stop: asyncio.Event, session: str
) -> int:
    """The sandbox's exit status, or 128 + the signal that stopped the session first (a
    ``stop`` from the owner's control socket counts as SIGTERM, and is said on stderr)."""
    received: list[int] = []
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        received.append(signum)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        async with running(process.wait(), stop.wait()) as (waiter, stopper):
            await first_done(waiter, stopper)
            if not waiter.done():
                # Killing the backend process ends the sandbox: bwrap --die-with-parent
                # and unshare --kill-child take the PID namespace, daemons included.
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            status: int = await waiter
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(signum)
    if received:
        return 128 + received[0]
    if stop.is_set():
        print(f"sandbridge: {owner_stopped(session)}", file=sys.stderr, flush=True)
        return 128 + signal.SIGTERM
    return 128 - status if status < 0 else status


def default_home() -> Path:
    """The home the sandbox gets privately: ``$HOME``'s path, else ``/tmp/home``."""
    home = Path(os.environ.get("HOME") or "/nonexistent")
    return home if home.is_dir() and home != Path("/") else Path("/tmp/home")


def stdin_is_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()
