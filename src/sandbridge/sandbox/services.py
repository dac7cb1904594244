"""What the sandbox entry serves on the event loop while the user's command runs: the
shim on ``upstream.sock``, the gate ports (allow mode), terminal starts over the
host's private channel, and publishing (``--publish``, auto-publish rules).

The entry (:mod:`sandbridge.sandbox.entry`) binds the listeners and starts the command
first, and serves the shim's handoffs, the gate ports and terminal starts without an
event loop (:mod:`sandbridge.relay.light_shim`, :mod:`sandbridge.egress.light_gate`,
:mod:`sandbridge.terminals.light_starter`); this module, and the event loop with it, is
imported only once something needs more. Their open connections go on being served
here, by the same handlers, on the event loop; the light gate and the terminal starter
go on serving their listeners (the entry never runs a second of either).
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
from sandbridge.aio.tasks import running
from sandbridge.egress.light_gate import LightGate
from sandbridge.exceptions import PolicyError
from sandbridge.protocol.contract import DEFAULT_RELAY_SOCKET, RELAY_SOCKET_ENV
from sandbridge.protocol.publish_rules import PublishRule, parse_rule_option, publishes_any
from sandbridge.relay.auto_publish import auto_publish
from sandbridge.relay.light_shim import LightShim
from sandbridge.relay.publish import parse_publish, publish
from sandbridge.relay.shim import Shim
from sandbridge.terminals.light_starter import LightStarter


@dataclass
class Services:
    """The entry's listeners, bound before the command started, and what else to serve."""

    upstream: socket.socket
    upstream_path: Path
    egress_socket: Path
    # Gate port -> its listening socket (allow mode).
    gate_ports: dict[int, socket.socket] = field(default_factory=dict)
    published: list[tuple[int, str]] = field(default_factory=list)
    publish_rules: list[PublishRule] = field(default_factory=list)
    terminal_fd: int | None = None
    # What served until now without an event loop, if anything did: the loop, the
    # shim and the gate it ran.
    poll_loop: PollLoop | None = None
    light_shim: LightShim | None = None
    light_gate: LightGate | None = None
    light_starter: LightStarter | None = None


def parse_publishing(
    publish: list[str], publish_rules: list[str]
) -> tuple[list[tuple[int, str]], list[PublishRule]]:
    """The entry's ``--publish`` and ``--publish-rule`` values; a bad one raises
    ``ValueError`` naming it."""
    try:
        return (
            [parse_publish(value) for value in publish],
            [parse_rule_option(value) for value in publish_rules],
        )
    except PolicyError as exc:
        raise ValueError(str(exc)) from None


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
    published = services.published
    helpers = [publish(port, base) for port, base in published]
    if publishes_any(services.publish_rules):
        socket_path = os.environ.get(RELAY_SOCKET_ENV, DEFAULT_RELAY_SOCKET)
        # A port published by --publish PORT is not published a second time.
        helpers.append(
            auto_publish(services.publish_rules, socket_path, {port for port, _ in published})
        )
    starter = services.light_starter
    if starter is None and services.terminal_fd is not None:
        # The host's private channel (docs/terminals.md), served as the entry serves it.
        starter = LightStarter(poll_loop, services.terminal_fd)
        starter.start()
    try:
        async with running(*helpers):
            return await _command_status(pid)
    finally:
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
