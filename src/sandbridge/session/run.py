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
from collections.abc import Callable
from pathlib import Path

from sandbridge import log
from sandbridge.egress.gate import EgressGate
from sandbridge.egress.log import LOG_NAME, EgressLog
from sandbridge.egress.policy import NetMode, Policy
from sandbridge.places.registry import SessionEntry
from sandbridge.places.runtime_dir import RuntimeDir
from sandbridge.protocol.contract import EGRESS_SOCKET
from sandbridge.relay.app_listener import App
from sandbridge.relay.settings import RelaySettings
from sandbridge.relay.upstream import Protocol
from sandbridge.sandbox.backend import sandbox_argv
from sandbridge.sandbox.spec import SandboxSpec
from sandbridge.session.host import HostSession
from sandbridge.terminals.broker import TerminalBroker
from sandbridge.terminals.settings import TerminalSettings


async def run_session(
    spec_factory: Callable[[Path], SandboxSpec],
    backend: str,
    *,
    protocol: Protocol = Protocol.STREAM,
    on_register: Callable[[App], None] | None = None,
    runtime_path: Path | None = None,
    settings: RelaySettings | None = None,
    name: str | None = None,
    on_session: Callable[[SessionEntry], None] | None = None,
    policy: Policy | None = None,
) -> int:
    """Run one sandbox session named ``name`` (else a random id); return the exit status."""
    terminal_settings = TerminalSettings.from_env()
    runtime_dir = RuntimeDir.create(runtime_path)
    # The host's private channel to the sandbox entry, for starting terminal workers: an
    # inherited descriptor, never a path in the runtime dir (docs/terminals.md).
    host_end, sandbox_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    spec = dataclasses.replace(spec_factory(runtime_dir.path), terminal_fd=sandbox_end.fileno())
    try:
        entry = SessionEntry.create(name, spec.workdir)
    except BaseException:
        runtime_dir.remove()
        host_end.close()
        sandbox_end.close()
        raise
    for note in (runtime_dir.note, entry.note):
        if note is not None:
            print(f"sandbridge: {note}", file=sys.stderr, flush=True)
    session = HostSession(
        runtime_dir,
        protocol=protocol,
        on_register=on_register,
        settings=RelaySettings() if settings is None else settings,
        entry=entry,
    )
    gate: EgressGate | None = None
    if policy is not None and policy.mode.value is NetMode.ALLOW:
        egress_log = EgressLog(entry.path / LOG_NAME)
        gate = EgressGate(runtime_dir.path / EGRESS_SOCKET, policy, egress_log)
    broker = TerminalBroker(entry.id, entry.control_socket, host_end, terminal_settings)
    try:
        await session.start()
        if gate is not None:
            await gate.start()
        await broker.start()
        if on_session is not None:
            on_session(entry)
        argv = sandbox_argv(backend, spec)
        log.debug("sandbox.start", backend=backend, runtime_dir=str(runtime_dir.path))
        process = await asyncio.create_subprocess_exec(*argv, pass_fds=(sandbox_end.fileno(),))
        sandbox_end.close()
        stop = asyncio.Event()
        received: list[int] = []
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            received.append(signum)
            stop.set()

        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(signum, on_signal, signum)
        waiter = asyncio.create_task(process.wait())
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if not waiter.done():
            # Killing the backend process ends the sandbox: bwrap --die-with-parent
            # and unshare --kill-child take the PID namespace, daemons included.
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        status = await waiter
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(signum)
        if received:
            return 128 + received[0]
        return 128 - status if status < 0 else status
    finally:
        sandbox_end.close()
        await broker.close()
        if gate is not None:
            await gate.close()
        await session.close()
        entry.remove()


def default_home() -> Path:
    """The home the sandbox gets privately: ``$HOME``'s path, else ``/tmp/home``."""
    home = Path(os.environ.get("HOME") or "/nonexistent")
    return home if home.is_dir() and home != Path("/") else Path("/tmp/home")


def stdin_is_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()
