"""What the sandbox entry serves on the event loop while the user's command runs: the
shim on ``upstream.sock``, the gate ports (allow mode), terminal starts over the
host's private channel, and publishing (``--publish``, auto-publish rules).

The entry (:mod:`sandbridge.sandbox.entry`) binds the listeners and starts the command
first, and serves the shim's handoffs, the gate ports, terminal starts and publishing
without an event loop (:mod:`sandbridge.relay.inside.light_shim`,
:mod:`sandbridge.egress.light_gate`, :mod:`sandbridge.terminals.light_starter`,
:mod:`sandbridge.relay.inside.publish`,
:mod:`sandbridge.relay.inside.auto_publish`); this module, and
the event loop with it, is imported only once something needs more. Their open
connections go on being served here, by the same handlers, on the event loop; the light
gate, the terminal starter and the publishers go on as they were (the entry never runs
a second of any).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path

from sandbridge.aio import event_loop
from sandbridge.aio.before_loop import reap
from sandbridge.aio.poll_loop import PollLoop
from sandbridge.egress.light_gate import LightGate
from sandbridge.relay.inside.auto_publish import AutoPublisher
from sandbridge.relay.inside.light_shim import LightShim
from sandbridge.relay.inside.publish import PortPublisher
from sandbridge.relay.inside.shim import Shim
from sandbridge.terminals.light_starter import LightStarter


@dataclass
class Services:
    """The entry's listeners, bound before the command started, and what else to serve."""

    upstream: socket.socket
    upstream_path: Path
    egress_socket: Path
    # Gate port -> its listening socket (allow mode).
    gate_ports: dict[int, socket.socket] = field(default_factory=dict)
    terminal_fd: int | None = None
    # What served until now without an event loop, if anything did: the loop, the
    # shim, the gate, the terminal starter and the publishers it ran.
    poll_loop: PollLoop | None = None
    light_shim: LightShim | None = None
    light_gate: LightGate | None = None
    light_starter: LightStarter | None = None
    publishers: list[PortPublisher | AutoPublisher] = field(default_factory=list)


def serve(pid: int, services: Services) -> int:
    """Serve ``services`` until the command ``pid`` (this process's child) ends; return
    its exit status (128 + N for a signal)."""
    return event_loop.run(_serve(pid, services))


async def _serve(pid: int, services: Services) -> int:
    loop = asyncio.get_running_loop()
    poll_loop = services.poll_loop or PollLoop()
    poll_loop.move_to(loop)  # what it serves goes on, here
    shim = Shim(services.upstream_path)
    light = services.light_shim
    if light is not None:  # it leaves the listener to the shim and passes on what it read
        light.continue_on(loop, shim.adopt)
    await shim.start(services.upstream)
    gate = services.light_gate
    if gate is None and services.gate_ports:
        gate = LightGate(poll_loop, services.gate_ports, str(services.egress_socket))
        gate.start()
    starter = services.light_starter
    if starter is None and services.terminal_fd is not None:
        # The host's private channel (docs/terminals.md), served as the entry serves it.
        starter = LightStarter(poll_loop, services.terminal_fd)
        starter.start()
    try:
        return await _command_status(pid)
    finally:
        for publisher in services.publishers:
            publisher.close()
        if gate is not None:
            gate.close()
        if starter is not None:
            starter.close()
        if light is not None:
            light.close()
        await shim.close()


async def _command_status(pid: int) -> int:
    """Wait for the command to end, passing SIGTERM on to it meanwhile; SIGINT reaches
    it through the terminal's process group and must not end this process."""
    loop = asyncio.get_running_loop()
    reaped = False

    def terminate() -> None:
        if not reaped:  # a reaped pid may be another process's by now
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    loop.add_signal_handler(signal.SIGINT, lambda: None)
    loop.add_signal_handler(signal.SIGTERM, terminate)
    exited: asyncio.Future[None] = loop.create_future()

    def on_exit() -> None:
        if not exited.done():
            exited.set_result(None)

    pidfd = os.pidfd_open(pid)
    try:
        loop.add_reader(pidfd, on_exit)
        await exited
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    status = reap(pid)
    reaped = True
    return status
