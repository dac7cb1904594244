"""``sandbridge connect`` (the laptop) and ``sandbridge serve-stdio`` (the far machine):
sandboxes on other machines (docs/remote.md)."""

from __future__ import annotations

import argparse
import asyncio
import signal

from sandbridge.aio import event_loop
from sandbridge.aio.heap import keep_freed_heap
from sandbridge.aio.tasks import first_done, running
from sandbridge.cli.ssh_options import add_ssh_options, ssh_transport
from sandbridge.exceptions import SandbridgeError
from sandbridge.places.remotes import RemoteEntry
from sandbridge.remote.connect import GONE_AFTER_SECONDS, Machine
from sandbridge.remote.far import check_stdio, serve_stdio
from sandbridge.remote.transport import OpenLink
from sandbridge.remote.via import via_transport


def cmd_serve_stdio(args: argparse.Namespace) -> int:
    check_stdio()
    keep_freed_heap()
    return int(event_loop.run(serve_stdio()))


def transport(args: argparse.Namespace) -> tuple[OpenLink, str, str]:
    """The transport ``connect`` was asked for, how ``ls`` describes it, and the
    machine's name (``--name``, else ``remote``)."""
    ssh = ssh_transport(args)
    if ssh is not None:
        return ssh
    name = args.name or "remote"
    if not args.via:
        raise SandbridgeError(
            "give a destination ([USER@]HOST) or --via CMD: a command that reaches "
            "sandbridge serve-stdio"
        )
    return via_transport(args.via, name), args.via, name


async def _connect(args: argparse.Namespace) -> int:
    open_link, via, name = transport(args)
    entry = RemoteEntry.create(name, via)
    try:
        machine = Machine(name, open_link, entry, gone_after=args.gone_after)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        async with running(machine.run(), stop.wait()) as (served, stopped):
            await first_done(served, stopped)
            return int(served.result()) if served.done() else 0
    finally:
        entry.remove()


# The bridges a session's own host half serves, which ``connect`` does not carry: each
# refused by name (docs/remote.md#bridges-over-connect) rather than left to argparse's
# "unrecognized arguments".
NOT_OVER_CONNECT = {
    "ssh_agent": (
        "--ssh-agent",
        "your agent is on this machine, the far session's host half on the far one, and the "
        "link carries apps and terminal requests only; run the far session with the far "
        "machine's own keys (sandbridge run --ssh-agent KEY there)",
    ),
    "clipboard": (
        "--clipboard",
        "the link carries neither the owner's question nor the clipboard's bytes; the far "
        "session's clipboard would be the far machine's, not yours",
    ),
    "containers": (
        "--containers",
        "a far session's containers run on the far machine's engine; start that session "
        "there with sandbridge run --containers (docs/containers.md)",
    ),
}


def cmd_connect(args: argparse.Namespace) -> int:
    for name, (flag, why) in NOT_OVER_CONNECT.items():
        if getattr(args, name) is not None:
            raise SystemExit(
                f"sandbridge: {flag} is not served over connect: {why} "
                "(docs/remote.md, Bridges over connect)"
            )
    if args.gone_after <= 0:
        raise SystemExit(f"sandbridge: --gone-after must be positive, got {args.gone_after:g}")
    keep_freed_heap()
    return int(event_loop.run(_connect(args)))


def add_connect(connect: argparse.ArgumentParser) -> None:
    """``sandbridge connect``'s arguments."""
    connect.add_argument(
        "--via",
        metavar="CMD",
        help="a command whose stdin and stdout reach the far 'sandbridge serve-stdio' "
        "(e.g. 'ssh box sandbridge serve-stdio', 'kubectl exec -i POD -- sandbridge serve-stdio')",
    )
    connect.add_argument(
        "--name",
        default=None,
        help="the far machine's name in sandbridge ls and messages (default: remote)",
    )
    connect.add_argument(
        "--gone-after",
        type=float,
        default=GONE_AFTER_SECONDS,
        metavar="SECONDS",
        help="give a far machine up after this long without a link "
        f"(default {GONE_AFTER_SECONDS:g})",
    )
    for name, (flag, _) in NOT_OVER_CONNECT.items():
        # Taken only to be refused by name (cmd_connect); not in --help. A flag that takes
        # no value elsewhere (--containers) is taken with or without one.
        connect.add_argument(
            flag, dest=name, default=None, nargs="?", const="", help=argparse.SUPPRESS
        )
    add_ssh_options(connect)
    _verbose_option(connect)
    connect.set_defaults(func=cmd_connect)


def add_serve_stdio(serve: argparse.ArgumentParser) -> None:
    """``sandbridge serve-stdio``'s arguments."""
    _verbose_option(serve)
    serve.set_defaults(func=cmd_serve_stdio)


def _verbose_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print the link's events as key=value lines, debug events included",
    )
