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
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from sandbridge import log
from sandbridge.aio.tasks import first_done, running
from sandbridge.places.registry import SessionEntry
from sandbridge.places.runtime_dir import RuntimeDir
from sandbridge.sandbox.backend import env_payload, sandbox_argv
from sandbridge.sandbox.spec import SandboxSpec, environment_file
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
    runtime_dir = RuntimeDir.create(runtime_path)
    # The host's private channel to the sandbox entry, for starting terminal workers: an
    # inherited descriptor, never a path in the runtime dir (docs/terminals.md).
    host_end, sandbox_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with host_end, sandbox_end, contextlib.ExitStack() as cleanup:
        try:
            spec = dataclasses.replace(
                spec_factory(runtime_dir.path), terminal_fd=sandbox_end.fileno()
            )
            # The environment's values (secrets among them) on a descriptor, not argv.
            env_fd = environment_file(env_payload(backend, spec))
            cleanup.callback(os.close, env_fd)
            spec = dataclasses.replace(spec, env_fd=env_fd)
        except BaseException:
            runtime_dir.remove()
            raise
        options = dataclasses.replace(
            options, workdir=spec.workdir, terminal_channel=host_end, command=tuple(spec.command)
        )
        async with host_half(daemon, runtime_dir, options) as (entry, stop):
            if on_session is not None:
                on_session(entry)
            argv = sandbox_argv(backend, spec)
            log.debug("sandbox.start", backend=backend, runtime_dir=str(runtime_dir.path))
            process = await asyncio.create_subprocess_exec(
                *argv, pass_fds=(sandbox_end.fileno(), env_fd)
            )
            sandbox_end.close()
            cleanup.close()  # the backend has its own copy of the environment's memfd
            return await _until_exit_or_signal(process, stop)


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


async def _until_exit_or_signal(process: asyncio.subprocess.Process, stop: asyncio.Event) -> int:
    """The sandbox's exit status, or 128 + the signal that stopped the session first (a
    ``stop`` from the owner's control socket counts as SIGTERM)."""
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
        return 128 + signal.SIGTERM
    return 128 - status if status < 0 else status


def default_home() -> Path:
    """The home the sandbox gets privately: ``$HOME``'s path, else ``/tmp/home``."""
    home = Path(os.environ.get("HOME") or "/nonexistent")
    return home if home.is_dir() and home != Path("/") else Path("/tmp/home")


def stdin_is_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()
