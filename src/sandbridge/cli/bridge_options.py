"""The agents' bridges' options on ``run`` and ``host``, together: the ssh agent, the
clipboard and the container engine (each its own module, ``*_options.py``).

Each is off unless the owner turns it on, and a session with any of them is served by
its own process, never the daemon (:func:`is_on`): the daemon holds neither the owner's
agent nor engine socket, and has no terminal to ask before a clipboard read.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sandbridge.cli import clipboard_options, containers_options, ssh_agent_options
from sandbridge.protocol.contract import SANDBOX_SSH_AGENT_SOCKET, SSH_AGENT_SOCKET


def add_options(parser: argparse.ArgumentParser) -> None:
    """Every bridge's flags."""
    ssh_agent_options.add_options(parser)
    clipboard_options.add_options(parser)
    containers_options.add_options(parser)


def is_on(args: argparse.Namespace) -> bool:
    """Whether the session has any of the bridges (so is served by its own process)."""
    return (
        ssh_agent_options.is_on(args)
        or clipboard_options.is_on(args)
        or containers_options.is_on(args)
    )


def policy_lines(args: argparse.Namespace) -> list[str]:
    """What ``--print-policy`` says of the bridges."""
    return (
        ssh_agent_options.policy_lines(args)
        + clipboard_options.policy_lines(args)
        + containers_options.policy_lines(args)
    )


def sandbox_env(args: argparse.Namespace) -> dict[str, str]:
    """The sandbox's variables for the bridges that are on."""
    return {**ssh_agent_options.sandbox_env(args), **containers_options.sandbox_env(args)}


def host_lines(args: argparse.Namespace, runtime_dir: Path) -> list[str]:
    """What ``sandbridge host`` says of the bridges: where each socket is, and what to
    set or run inside the container."""
    lines = []
    if ssh_agent_options.is_on(args):
        lines.append(
            f"sandbridge: ssh-agent on {runtime_dir / SSH_AGENT_SOCKET}; inside, "
            f"set SSH_AUTH_SOCK={SANDBOX_SSH_AGENT_SOCKET}"
        )
    return (
        lines
        + clipboard_options.host_lines(args, runtime_dir)
        + containers_options.host_lines(args, runtime_dir)
    )
