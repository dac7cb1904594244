"""``--ssh-agent KEY[,KEY...]`` on ``run`` and ``host`` (docs/ssh-agent.md).

The value's parse is :func:`sandbridge.ssh_agent.choice.parse_choice`, the one the owner's
config key ``ssh_agent = ...`` (``~/.config/sandbridge/config``) goes through too; the flag
wins over the config. The project's ``.sandbridge/`` never turns it on.
A session with the bridge is served by its own process: the daemon does not hold the
owner's agent socket (the run builder and ``_serve_here`` leave such a run to it).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from sandbridge.exceptions import SandbridgeError
from sandbridge.project.owner_config import read_owner_config
from sandbridge.protocol.contract import SANDBOX_SSH_AGENT_SOCKET

# The choice's parse (and the agent protocol under it) is imported when the bridge is on:
# a session without it reads its flag and config key alone.
if TYPE_CHECKING:
    from sandbridge.ssh_agent.choice import AgentSettings

SSH_AUTH_SOCK = "SSH_AUTH_SOCK"


def add_options(parser: argparse.ArgumentParser) -> None:
    """The flag, on ``run`` and ``host``."""
    parser.add_argument(
        "--ssh-agent",
        action="append",
        default=[],
        metavar="KEY[:MODE][,KEY...]",
        help="give the sandbox an SSH_AUTH_SOCK that lists and signs with these keys of "
        "your agent alone (SHA256 fingerprint or comment, as ssh-add -l prints them); "
        "MODE: always (default), session (ask once), each (ask before every signature)",
    )


def _chosen(args: argparse.Namespace) -> tuple[list[str], str] | None:
    """The key choices and where they came from: the flag, else the owner's config
    (``ssh_agent = ...``, each line's value; the first line names the source), else
    ``None`` (the bridge is off)."""
    if args.ssh_agent:
        return list(args.ssh_agent), "--ssh-agent"
    lines = read_owner_config(os.environ).ssh_agent
    if not lines:
        return None
    return [line.value for line in lines], lines[0].source


def is_on(args: argparse.Namespace) -> bool:
    """Whether the session has the bridge (the flag, or the owner's config)."""
    return _chosen(args) is not None


def settings_of(args: argparse.Namespace) -> AgentSettings | None:
    """The session's ssh-agent settings (None: the bridge is off); refuses a malformed
    choice, or a host without an agent."""
    chosen = _chosen(args)
    if chosen is None:
        return None
    from sandbridge.ssh_agent.choice import AgentSettings, parse_choice

    choice = parse_choice(*chosen)
    owner_agent = os.environ.get(SSH_AUTH_SOCK, "")
    if not owner_agent:
        raise SandbridgeError(
            f"{chosen[1]}: SSH_AUTH_SOCK is not set here; start your ssh-agent "
            '(eval "$(ssh-agent)") and ssh-add the keys, then run again'
        )
    return AgentSettings(choice, owner_agent)


def sandbox_env(args: argparse.Namespace) -> dict[str, str]:
    """The sandbox's ``SSH_AUTH_SOCK`` when the bridge is on (its own socket, never the
    owner's)."""
    return {SSH_AUTH_SOCK: SANDBOX_SSH_AGENT_SOCKET} if _chosen(args) is not None else {}


def policy_lines(args: argparse.Namespace) -> list[str]:
    """What ``--print-policy`` says of the bridge."""
    chosen = _chosen(args)
    if chosen is None:
        return ["ssh-agent: off (--ssh-agent KEY, or ssh_agent = KEY in your config, turns it on)"]
    from sandbridge.ssh_agent.choice import parse_choice

    keys = ", ".join(parse_choice(*chosen).shown())
    return [
        f"ssh-agent: on at {SANDBOX_SSH_AGENT_SOCKET} ({chosen[1]}): lists and signs with "
        f"{keys}; every other agent request refused; each signature logged"
    ]
