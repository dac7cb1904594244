"""``sandbridge connect [USER@]HOST``'s SSH options, and the transport they choose.

``connect`` takes either a destination (the SSH transport, ``remote/ssh_transport.py``)
or ``--via CMD`` (any command); this module adds the destination and its options to the
``connect`` parser and turns them into an :data:`~sandbridge.remote.transport.OpenLink`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sandbridge.exceptions import RemoteLinkError
from sandbridge.places.registry import NAME_PATTERN
from sandbridge.remote.transport import DEFAULT_REMOTE_COMMAND, OpenLink

# ``sandbridge.remote.ssh_transport`` is imported only once a destination is given: it
# imports asyncssh, which would add a tenth of a second to the start of every command.


def add_ssh_options(connect: Any) -> None:
    """The destination (optional: ``--via`` is the other way) and its SSH options."""
    connect.add_argument(
        "destination",
        nargs="?",
        metavar="[USER@]HOST[:PORT]",
        help="reach the far machine over SSH with your own ssh config, keys, agent and "
        "known_hosts (docs/remote.md, 'Over SSH')",
    )
    connect.add_argument(
        "--remote-command",
        default=DEFAULT_REMOTE_COMMAND,
        metavar="CMD",
        help=f"what SSH runs on the far machine (default: {DEFAULT_REMOTE_COMMAND!r})",
    )
    connect.add_argument(
        "-F",
        "--ssh-config",
        type=Path,
        metavar="FILE",
        help="read this ssh config instead of ~/.ssh/config (as ssh -F does)",
    )


def ssh_link_opener(args: argparse.Namespace) -> OpenLink | None:
    """The SSH transport when a destination was given, else ``None`` (use ``--via``).
    A destination and ``--via`` together, or a malformed destination, is a one-line
    ``SystemExit`` naming it."""
    if args.destination is None:
        return None
    from sandbridge.remote.ssh_transport import SshSettings, ssh_opener

    if getattr(args, "via", None):
        raise SystemExit(
            f"sandbridge: give either a destination ({args.destination!r}) or --via, not both"
        )
    settings = SshSettings(
        config_paths=(args.ssh_config,) if args.ssh_config else None,
        remote_command=args.remote_command,
    )
    try:
        return ssh_opener(args.destination, settings)
    except RemoteLinkError as error:
        raise SystemExit(f"sandbridge: {error}") from None


def ssh_transport(args: argparse.Namespace) -> tuple[OpenLink, str, str] | None:
    """``connect``'s SSH transport when a destination was given, as ``cli/remote.py``'s
    ``transport`` returns one: the opener, how ``ls`` describes it (``ssh DEST``), and
    the machine's name (``--name``, else the host when it is a valid name, else
    ``remote``). ``None`` without a destination (``--via`` then)."""
    opener = ssh_link_opener(args)
    if opener is None:
        return None
    from sandbridge.remote.ssh_transport import parse_destination

    host = parse_destination(args.destination).host.lower()
    default = host if NAME_PATTERN.fullmatch(host) else "remote"
    return opener, f"ssh {args.destination}", args.name or default
