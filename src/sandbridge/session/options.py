"""What a session serves, beside its runtime dir (:class:`SessionOptions`), and its
registry entry (:func:`create_entry`).

Apart from the lifecycle that serves them (``lifecycle.py``), so that a ``run`` the
daemon serves (``served.py``) builds and sends them without importing the host halves.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sandbridge.places.registry import SessionEntry
from sandbridge.places.runtime_dir import RuntimeDir
from sandbridge.relay.host.settings import ForwardingMode

if TYPE_CHECKING:  # the host halves' modules (and the settings of some): not imported
    import socket

    from sandbridge.clipboard.mode import ClipboardSettings
    from sandbridge.containers.settings import ContainerSettings
    from sandbridge.project.policy import Policy
    from sandbridge.relay.host.app import App
    from sandbridge.relay.host.open_settings import OpenSettings
    from sandbridge.relay.host.settings import RelaySettings
    from sandbridge.ssh_agent.choice import AgentSettings


@dataclass(frozen=True, slots=True)
class SessionOptions:
    """What a session serves, beside its runtime dir."""

    workdir: Path
    name: str | None = None
    # The other places the sandbox can write (its ``--bind`` sources): with the workdir,
    # no host command is ever taken from them (places/host_commands.py), in a daemon for
    # every session it serves after this one too.
    writable: tuple[Path, ...] = ()
    protocol: ForwardingMode = ForwardingMode.AUTO
    settings: RelaySettings | None = None
    on_register: Callable[[App], None] | None = None
    # Called when an auto-published app is gone (its sandbox socket closed).
    on_unregister: Callable[[App], None] | None = None
    # The egress gate runs when the policy's mode is ``allow``.
    policy: Policy | None = None
    # The host's end of the private channel to the sandbox's entry: terminals need it.
    terminal_channel: socket.socket | None = None
    # The host's end of the socket pair on which the entry sends its network namespace:
    # app connections the host owns alone (relay/host/owned_upstream.py).
    namespace_channel: socket.socket | None = None
    # Or the network namespace itself, received already (the daemon's: the run client
    # sends it with its request); the session's owned upstream takes a copy.
    network_namespace: int | None = None
    # Another runtime's sandbox: terminals through terminal.sock in the runtime dir,
    # which ``sandbridge shim --terminals`` serves inside (docs/external-runtimes.md).
    terminal_socket: bool = False
    # How the sandbox's open requests are carried out (docs/open.md); without it, as
    # OpenSettings.for_host decides from the environment.
    open_settings: OpenSettings | None = None
    # The command the sandbox runs, as the owner's dashboard shows it.
    command: tuple[str, ...] = ()
    # Called when anything the owner's dashboard shows of the session changes: an app
    # registered or gone, a terminal request or its move, an egress decision or request.
    on_change: Callable[[], None] | None = None
    # The ssh-agent bridge (docs/ssh-agent.md): off unless the owner names keys. Served
    # by the session's own process alone: the daemon never holds the owner's agent.
    ssh_agent: AgentSettings | None = None
    # The clipboard bridge (docs/clipboard.md): off unless the owner turns it on. Served
    # by the session's own process alone: it asks the owner on that process's terminal.
    clipboard: ClipboardSettings | None = None
    # The container engine bridge (docs/containers.md): off unless the owner turns it on.
    # Served by the session's own process alone, which removes its containers at the end.
    containers: ContainerSettings | None = None


def create_entry(
    runtime_dir: RuntimeDir, options: SessionOptions, pid: int | None = None
) -> SessionEntry:
    """The session's registry entry (``runtime_dir`` is removed if it cannot be made);
    the notes of both are printed. ``pid``: the session's process, if not this one."""
    try:
        entry = SessionEntry.create(
            options.name, options.workdir, runtime_dir=runtime_dir.path, pid=pid
        )
    except BaseException:
        runtime_dir.remove()
        raise
    for note in (runtime_dir.note, entry.note):
        if note is not None:
            print(f"sandbridge: {note}", file=sys.stderr, flush=True)
    return entry
