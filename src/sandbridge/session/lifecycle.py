"""One session's host side, from its registry entry to its teardown.

``sandbridge run`` and ``sandbridge host`` (a sandbox another runtime starts) share
this: :func:`open_session` owns the runtime dir it is given and the session's registry
entry, and starts what the session serves (the registration server and app listeners;
the egress gate when the policy allows named destinations; the terminal broker when the
host holds a channel to the sandbox's entry, or the sandbox serves ``terminal.sock``;
the opener of the sandbox's open requests; the ssh-agent, clipboard and container
engine bridges the owner turned on). Leaving the ``async with`` closes all of it
in the reverse order and removes the entry and the runtime dir, whatever ended it.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from sandbridge.aio.owner_questions import OwnerQuestions, terminal_asker
from sandbridge.egress.no_gate import OwnerOp, refuse_without_gate
from sandbridge.exceptions import ControlRefusal, RegistrationError
from sandbridge.places import host_commands
from sandbridge.places.registry import SessionEntry
from sandbridge.places.runtime_dir import RuntimeDir
from sandbridge.project.policy import NetMode
from sandbridge.protocol.contract import (
    CLIPBOARD_SOCKET,
    CONTAINERS_SOCKET,
    EGRESS_SOCKET,
    SSH_AGENT_SOCKET,
)
from sandbridge.relay.host.app import App
from sandbridge.relay.host.host_opener import HostOpener
from sandbridge.relay.host.open_settings import OpenSettings
from sandbridge.relay.host.owned_upstream import PendingOwnedUpstream
from sandbridge.relay.host.settings import RelaySettings
from sandbridge.session.host import HostSession
from sandbridge.session.options import SessionOptions, create_entry
from sandbridge.terminals.broker import TerminalBroker, WorkerStarter
from sandbridge.terminals.pending import FILE as PENDING_FILE
from sandbridge.terminals.sandbox_channel import SandboxChannel
from sandbridge.terminals.settings import TerminalSettings
from sandbridge.terminals.worker_socket import WorkerSocket

if TYPE_CHECKING:
    from sandbridge.clipboard.server import ClipboardBridge
    from sandbridge.containers.server import ContainerBridge
    from sandbridge.egress.gate import EgressGate
    from sandbridge.ssh_agent.server import AgentBridge


@dataclass(frozen=True, slots=True)
class Session:
    entry: SessionEntry
    host: HostSession
    runtime_dir: RuntimeDir
    # Set when the owner asked the session to end (the control socket's ``stop``): the
    # session's owner (``run.py``) ends the sandbox as it would on SIGTERM.
    stop_requested: asyncio.Event
    # The owner's ops on this session (``session_info``, ``egress_summary``, ...), for a
    # host that reads them in-process (the daemon's dashboard); the same the control
    # socket serves.
    ops: Mapping[str, OwnerOp]
    # The terminal broker (None: the session serves no terminals, nor a control socket).
    broker: TerminalBroker | None
    # The ssh-agent bridge (None: the owner chose no keys for this session).
    ssh_agent: AgentBridge | None = None
    # The clipboard bridge (None: the owner did not turn it on).
    clipboard: ClipboardBridge | None = None
    # The bridges' questions to the owner (aio/owner_questions.py).
    questions: OwnerQuestions | None = None
    # The container engine bridge (None: the owner did not turn it on).
    containers: ContainerBridge | None = None


def session_ops(
    options: SessionOptions,
    gate: EgressGate | None,
    host: HostSession,
    stop: asyncio.Event,
    session: str,
) -> dict[str, OwnerOp]:
    """The owner's control-socket ops the session serves beside terminals: egress
    requests and summary, ``session_info``, ``app_close`` and ``stop``."""
    policy = options.policy
    mode = NetMode.NONE if policy is None else policy.mode.value

    async def info(message: dict[str, Any]) -> dict[str, Any]:
        logins = {} if host.opener is None else host.opener.callbacks.listing()
        return {"command": list(options.command), "network": mode.value, **logins}

    async def request_stop(message: dict[str, Any]) -> dict[str, Any]:
        stop.set()
        return {"stopping": True}

    async def close_app(message: dict[str, Any]) -> dict[str, Any]:
        port = message.get("host_port")
        if type(port) is not int:
            raise ControlRefusal("malformed", f"host_port must be a port number, got {port!r}")
        try:
            app = await host.close_app(port)
        except RegistrationError as exc:
            raise ControlRefusal("unknown_app", str(exc)) from None
        return {"closed": app.host_port}

    async def no_summary(message: dict[str, Any]) -> dict[str, Any]:
        return {"mode": mode.value, "destinations": []}

    egress_ops = (
        {**refuse_without_gate(session), "egress_summary": no_summary}
        if gate is None
        else gate.owner_ops()
    )
    return {**egress_ops, "session_info": info, "stop": request_stop, "app_close": close_app}


def _owned_upstream(options: SessionOptions) -> PendingOwnedUpstream | None:
    """App connections the host owns (relay/host/owned_upstream.py): from the namespace the
    entry sends (a run served here), or the one the run client sent (the daemon)."""
    if options.network_namespace is not None:
        return PendingOwnedUpstream(None, namespace=os.dup(options.network_namespace))
    if options.namespace_channel is not None:
        return PendingOwnedUpstream(options.namespace_channel)
    return None


def _and_then(
    first: Callable[[App], None] | None, then: Callable[[], None]
) -> Callable[[App], None]:
    def both(app: App) -> None:
        if first is not None:
            first(app)
        then()

    return both


def _when_requests_change(
    broker: TerminalBroker, entry: SessionEntry, told: Callable[[], None] | None
) -> Callable[[], None]:
    """The broker's ``on_change``. It is called after every control op, reads too
    (``list``, ``session_info``, as serve-stdio and the dashboard ask them): the
    registry's watchers are told (``entry.touch``) only when the terminal requests
    changed, else each of their reads would make them read again, for good."""
    seen = broker.listing()

    def on_change() -> None:
        nonlocal seen
        now = broker.listing()
        if now != seen:
            seen = now
            entry.touch()
        if told is not None:
            told()

    return on_change


def _worker_starter(options: SessionOptions, runtime_dir: RuntimeDir) -> WorkerStarter | None:
    """How the session's terminal workers start, if it serves terminals."""
    if options.terminal_channel is not None:
        return SandboxChannel(options.terminal_channel)
    if options.terminal_socket:
        return WorkerSocket(runtime_dir.path)
    return None


def _ssh_agent(
    options: SessionOptions,
    runtime_dir: RuntimeDir,
    entry: SessionEntry,
    changed: Callable[[], None],
    questions: OwnerQuestions,
) -> AgentBridge | None:
    """The session's ssh-agent bridge, if the owner chose keys (its modules, asyncssh
    among them, are imported only then)."""
    if options.ssh_agent is None:
        return None
    from sandbridge.ssh_agent.server import AgentBridge
    from sandbridge.ssh_agent.signature_log import SignatureLog

    signatures = SignatureLog(entry.path)
    signatures.on_record = changed
    return AgentBridge(
        runtime_dir.path / SSH_AGENT_SOCKET,
        options.ssh_agent.choice,
        options.ssh_agent.owner_agent,
        signatures,
        questions,
    )


def _clipboard(  # noqa: PLR0913  (one session's parts)
    options: SessionOptions,
    runtime_dir: RuntimeDir,
    entry: SessionEntry,
    changed: Callable[[], None],
    out: TextIO | None,
    questions: OwnerQuestions,
) -> ClipboardBridge | None:
    """The session's clipboard bridge, if the owner turned it on."""
    if options.clipboard is None:
        return None
    from sandbridge.clipboard.read_log import TransferLog
    from sandbridge.clipboard.server import ClipboardBridge

    transfers = TransferLog(entry.path)
    transfers.on_record = changed
    return ClipboardBridge(
        runtime_dir.path / CLIPBOARD_SOCKET,
        options.clipboard,
        transfers,
        questions,
        out,
    )


def _containers(
    options: SessionOptions,
    runtime_dir: RuntimeDir,
    entry: SessionEntry,
    changed: Callable[[], None],
) -> ContainerBridge | None:
    """The session's container engine bridge, if the owner turned it on: its containers
    carry the session's id, and binds are checked against its workdir."""
    settings = options.containers
    if settings is None:
        return None
    from sandbridge.containers.binds import BindRules
    from sandbridge.containers.decision_log import DecisionLog
    from sandbridge.containers.server import ContainerBridge

    decisions = DecisionLog(entry.path)
    decisions.on_record = changed
    cover = entry.path / "containers-cover"  # empty: laid over what containers may not see
    cover.mkdir(mode=0o500, exist_ok=True)
    binds = BindRules(
        options.workdir.resolve(),
        cover,
        (settings.engine, runtime_dir.path),
        settings.protected,
        settings.hidden,
        (options.workdir, *options.writable),
    )
    return ContainerBridge(
        runtime_dir.path / CONTAINERS_SOCKET, settings, entry.id, binds, decisions
    )


def _present(
    *bridges: AgentBridge | ClipboardBridge | ContainerBridge | None,
) -> list[AgentBridge | ClipboardBridge | ContainerBridge]:
    """The bridges the session serves beside the relay, in their starting order."""
    return [bridge for bridge in bridges if bridge is not None]


def _egress_gate(
    options: SessionOptions,
    runtime_dir: RuntimeDir,
    entry: SessionEntry,
    changed: Callable[[], None],
) -> EgressGate | None:
    """The session's egress gate where its policy allows destinations (else ``None``)."""
    policy = options.policy
    if policy is None or policy.mode.value is not NetMode.ALLOW:
        return None
    # The gate's modules (its proxy, its log) are a session's that allows destinations:
    # one with net none or full never imports them, as a bridge's are imported when on.
    from sandbridge.egress.gate import EgressGate
    from sandbridge.egress.log import LOG_NAME, EgressLog

    gate = EgressGate(
        runtime_dir.path / EGRESS_SOCKET,
        policy,
        EgressLog(entry.path / LOG_NAME),
        session=entry.id,
    )
    gate.log.on_record = changed
    gate.requests.on_change = changed
    return gate


@asynccontextmanager
async def open_session(
    runtime_dir: RuntimeDir,
    options: SessionOptions,
    entry: SessionEntry | None = None,
    out: TextIO | None = None,
) -> AsyncIterator[Session]:
    """Register the session and start what it serves; on exit stop all of it and remove
    the entry and ``runtime_dir``.

    The daemon passes the ``entry`` its client made (the client removes it) and ``out``,
    where the session's messages for the owner go (default: stderr)."""
    if entry is None:
        entry = create_entry(runtime_dir, options)
    # The browser command is never one the sandbox could have put on PATH (in a daemon,
    # whose PATH may name the workdir or a bind too): places/host_commands.py.
    host_commands.distrust([options.workdir, *options.writable])
    # A change the dashboard shows is told to the daemon's (``on_change``) and, by the
    # session dir's times, to any reader watching the registry (serve-stdio, a dashboard
    # of `sandbridge ui --no-daemon`): places/registry_watch.py.
    told = options.on_change

    def changed() -> None:
        entry.touch()
        if told is not None:
            told()

    starter = _worker_starter(options, runtime_dir)
    # The bridges ask on this process's terminal, never when the session's messages go
    # elsewhere (``out``: a daemon's session), and list their questions for a dashboard
    # when the session serves a control socket (the broker's).
    questions = OwnerQuestions(
        terminal_asker() if out is None else None,
        starter is not None,
        announce=lambda text: print(f"sandbridge: {text}", file=out or sys.stderr, flush=True),
    )
    questions.on_change = changed
    opener = HostOpener(
        OpenSettings.for_host(os.environ)
        if options.open_settings is None
        else options.open_settings,
        out,
        questions,
    )
    opener.callbacks.on_change = changed  # a login's callback shows on the dashboard
    host = HostSession(
        runtime_dir,
        protocol=options.protocol,
        on_register=_and_then(options.on_register, changed),
        on_unregister=_and_then(options.on_unregister, changed),
        settings=RelaySettings() if options.settings is None else options.settings,
        entry=entry,
        opener=opener,
        owned=_owned_upstream(options),
    )
    gate = _egress_gate(options, runtime_dir, entry, changed)
    stop_requested = asyncio.Event()
    broker: TerminalBroker | None = None
    owner_ops = {
        **session_ops(options, gate, host, stop_requested, entry.id),
        **questions.owner_ops(),
    }
    if starter is not None:
        # The owner's egress answers and session ops travel on the same control socket.
        broker = TerminalBroker(
            entry.id,
            entry.control_socket,
            starter,
            TerminalSettings.from_env(),
            owner_ops=owner_ops,
            pending_path=entry.path / PENDING_FILE,
        )
        broker.on_change = _when_requests_change(broker, entry, told)
    ssh_agent = _ssh_agent(options, runtime_dir, entry, changed, questions)
    clipboard = _clipboard(options, runtime_dir, entry, changed, out, questions)
    containers = _containers(options, runtime_dir, entry, changed)
    try:
        for bridge in _present(ssh_agent, clipboard, containers):
            # Before anything else is served: a chosen key the owner's agent lacks, or a
            # host without clipboard tools, an engine that does not answer, ends the
            # session before its sandbox starts;
            # and the clipboard's socket exists before the sandbox's entry looks for it
            # (it writes the stand-ins only then).
            await bridge.start()
        await host.start()
        # A daemon serving this session again after a restart: its apps come back.
        await host.restore(entry.record.apps)
        if gate is not None:
            await gate.start()
        if broker is not None:
            await broker.start()
            entry.touch()  # its control socket answers now: the readers may ask it
        yield Session(
            entry, host, runtime_dir, stop_requested, owner_ops, broker, ssh_agent, clipboard,
            questions, containers,
        )  # fmt: skip
    finally:
        await questions.close()
        for bridge in _present(ssh_agent, clipboard, containers):
            await bridge.close()
        if broker is not None:
            await broker.close()
        if gate is not None:
            await gate.close()
        await host.close()
        await opener.close()
        entry.remove()
