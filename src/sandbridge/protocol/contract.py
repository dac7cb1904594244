"""The accepted wire contract's names, in one place (docs/contract.md).

A sandbox started by sandbridge or by another runtime finds the host through these: the
runtime dir mounted at :data:`MOUNT_POINT`, its sockets, and the environment variables
that name them. Nothing else in sandbridge spells them out.
"""

from __future__ import annotations

import os

# The sandbox entry imports this module before the command starts: neither pathlib nor
# re (with what they import, a few milliseconds of every session's start) at import.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

# The runtime dir on the host: ``${XDG_RUNTIME_DIR:-/tmp}/ags-webview-relay-<pid>``.
RUNTIME_DIR_PREFIX = "ags-webview-relay-"
# Where the runtime dir appears inside the sandbox.
MOUNT_POINT = "/run/ags-webview-relay"
# Registrations (the sandbox asks for an app's host URL).
RELAY_SOCKET = "relay.sock"
# The shim's listener, which the host connects to for each browser connection.
UPSTREAM_SOCKET = "upstream.sock"
# The host's egress gate, which the sandbox's gate listener bridges to.
EGRESS_SOCKET = "egress.sock"
# sandbridge's own: the egress proxy's port at the gate address (project/policy.py's
# DEFAULT_GATE_ADDR), a high, unassigned port no host service needs.
PROXY_PORT = 18081
# sandbridge's own, not the accepted contract's: ``sandbridge shim --terminals`` starts a
# terminal worker for each connection the host makes to it (a sandbox another runtime
# starts, where the host has no private channel to hand over: docs/external-runtimes.md).
TERMINAL_SOCKET = "terminal.sock"
# sandbridge's own: the sandbox's SSH_AUTH_SOCK when the owner turns the ssh-agent bridge
# on (docs/ssh-agent.md); served by the host from the owner's agent, chosen keys only.
SSH_AGENT_SOCKET = "ssh-agent.sock"
# sandbridge's own: the owner's clipboard when the owner turns the clipboard bridge on
# (docs/clipboard.md); the stand-ins inside (wl-paste, xclip, ...) talk to it.
CLIPBOARD_SOCKET = "clipboard.sock"
# sandbridge's own: the sandbox's DOCKER_HOST when the owner turns the container engine
# bridge on (docs/containers.md); the host forwards what its policy allows to the engine.
CONTAINERS_SOCKET = "containers.sock"

# The type of forwarding v1's request line on upstream.sock (protocol/v1.py).
V1_REQUEST_TYPE = "http_request"

RELAY_SOCKET_ENV = "AGS_WEBVIEW_RELAY_SOCKET"
UPSTREAM_SOCKET_ENV = "AGS_WEBVIEW_RELAY_UPSTREAM_SOCKET"
# Set to "1" inside every sandbox sandbridge starts.
IN_SANDBOX_ENV = "SANDBRIDGE_SANDBOX"

DEFAULT_RELAY_SOCKET = f"{MOUNT_POINT}/{RELAY_SOCKET}"
DEFAULT_UPSTREAM_SOCKET = f"{MOUNT_POINT}/{UPSTREAM_SOCKET}"
SANDBOX_SSH_AGENT_SOCKET = f"{MOUNT_POINT}/{SSH_AGENT_SOCKET}"
SANDBOX_CLIPBOARD_SOCKET = f"{MOUNT_POINT}/{CLIPBOARD_SOCKET}"
SANDBOX_CONTAINERS_SOCKET = f"{MOUNT_POINT}/{CONTAINERS_SOCKET}"

# sandbridge's own state beside the runtime dirs: ``<base>/sandbridge-<uid>``, with each
# session's control socket for the owner's commands.
STATE_PREFIX = "sandbridge-"
CONTROL_SOCKET = "control.sock"
# A session's name (and a far machine's): typed on command lines and used as a directory
# name, so short, lower case, no path separators, no leading dot or dash. The registry
# makes names by it and the remote link checks the far side's by it (each compiles it).
SESSION_NAME_REGEX = r"[a-z0-9][a-z0-9._-]{0,39}"
# The user's daemon (docs/daemon.md), in the state root: its socket and its pid lock.
DAEMON_SOCKET = "daemon.sock"
DAEMON_LOCK = "daemon.lock"


def is_session_name(value: str) -> bool:
    """Whether ``value`` matches :data:`SESSION_NAME_REGEX` (re is imported here, not at
    the module's import, and caches the pattern)."""
    import re

    return re.fullmatch(SESSION_NAME_REGEX, value) is not None


def runtime_base() -> Path:
    """Where runtime dirs live: ``$XDG_RUNTIME_DIR``, else ``/tmp``."""
    from pathlib import Path

    return Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp")
