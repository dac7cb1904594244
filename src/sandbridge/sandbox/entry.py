"""The sandbox's first process: start the shim, install the helpers, run the command.

The shim is listening before the command starts. The command's exit status becomes
this process's (128 + N for a signal), which the runner passes on to the user. When
this process ends, the PID namespace ends with it: every daemon the command left
behind is killed by the kernel.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import signal
import stat
import sys
from pathlib import Path

from sandbridge.aio import event_loop
from sandbridge.aio.tasks import running
from sandbridge.egress.gate_listener import GateListener
from sandbridge.exceptions import PolicyError
from sandbridge.protocol.contract import DEFAULT_RELAY_SOCKET, EGRESS_SOCKET, RELAY_SOCKET_ENV
from sandbridge.protocol.publish_rules import PublishRule, parse_rule_option, publishes_any
from sandbridge.relay.auto_publish import auto_publish
from sandbridge.relay.publish import parse_publish, publish
from sandbridge.relay.shim import Shim
from sandbridge.sandbox.spec import COMMANDS_DIR, OPEN_COMMAND
from sandbridge.terminals.starter import serve_terminal_starts

HELPER_NAME = "ags-webview-url"
URL_HELPER_MODULE = "sandbridge.relay.url_helper"
OPEN_HELPER_MODULE = "sandbridge.relay.open_helper"
ALLOW_COMMAND = "sandbridge-allow"
ALLOW_HELPER_MODULE = "sandbridge.egress.allow_helper"
# The commands through which tools open a browser on Debian and most distributions;
# each leads to sandbridge-open, as $BROWSER does.
BROWSER_SHIMS = ("xdg-open", "sensible-browser", "x-www-browser", "www-browser")
_EXECUTABLE = stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH


def _write_command(path: Path, module: str) -> Path:
    """A shell script running ``module`` with this Python (named explicitly, so that no
    ``python3`` on PATH is asked)."""
    path.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m {module} "$@"\n')
    path.chmod(_EXECUTABLE)
    return path


def install_helper(home: Path) -> Path:
    """Write ``~/.local/bin/ags-webview-url`` (where the contract puts it)."""
    bin_dir = home / ".local" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    return _write_command(bin_dir / HELPER_NAME, URL_HELPER_MODULE)


def install_commands(bin_dir: Path = Path(COMMANDS_DIR)) -> list[Path]:
    """Write sandbridge's own commands into ``bin_dir``, a directory holding nothing else
    (the only one sandbridge puts on the sandbox's PATH: sandbox/spec.py)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    return [
        _write_command(bin_dir / HELPER_NAME, URL_HELPER_MODULE),
        *(
            _write_command(bin_dir / name, OPEN_HELPER_MODULE)
            for name in (OPEN_COMMAND, *BROWSER_SHIMS)
        ),
        _write_command(bin_dir / ALLOW_COMMAND, ALLOW_HELPER_MODULE),
    ]


async def run(  # noqa: PLR0913  (what the entry serves beside the command, each optional)
    upstream_socket: Path,
    command: list[str],
    gate: GateListener | None = None,
    published: list[tuple[int, str]] | None = None,
    terminal_fd: int | None = None,
    publish_rules: list[PublishRule] | None = None,
) -> int:
    """Serve the shim (and the gate, terminal starts, publishing) while ``command`` runs.

    Returns the command's exit status.
    """
    shim = Shim(upstream_socket)
    await shim.start()
    if gate is not None:
        await gate.start()
    helpers = [publish(port, base) for port, base in published or []]
    rules = publish_rules or []
    if publishes_any(rules):
        socket_path = os.environ.get(RELAY_SOCKET_ENV, DEFAULT_RELAY_SOCKET)
        # A port published by --publish PORT is not published a second time.
        helpers.append(auto_publish(rules, socket_path, {port for port, _ in published or []}))
    if terminal_fd is not None:  # the host's private channel (docs/terminals.md)
        helpers.append(serve_terminal_starts(terminal_fd))
    try:
        async with running(*helpers):
            return await _run_command(command)
    finally:
        if gate is not None:
            await gate.close()
        await shim.close()


async def _run_command(command: list[str]) -> int:
    loop = asyncio.get_running_loop()
    # Ctrl-C reaches the command through the terminal's process group; the shim must
    # outlive it, so this process ignores SIGINT and forwards SIGTERM.
    loop.add_signal_handler(signal.SIGINT, lambda: None)
    try:
        process = await asyncio.create_subprocess_exec(*command)
    except OSError as exc:
        print(f"sandbridge: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    loop.add_signal_handler(signal.SIGTERM, process.terminate)
    status = await process.wait()
    return 128 - status if status < 0 else status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sandbridge-sandbox-entry")
    parser.add_argument("--upstream-socket", required=True, type=Path)
    parser.add_argument("--gate", help="the gate address (allow mode)")
    parser.add_argument("--gate-port", type=int, action="append", default=[])
    parser.add_argument("--publish", action="append", default=[])
    parser.add_argument("--publish-rule", action="append", default=[])
    parser.add_argument("--terminal-fd", type=int, default=None)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    install_helper(Path(os.environ.get("HOME", "/tmp")))
    install_commands()
    gate = None
    if args.gate:
        egress_socket = args.upstream_socket.parent / EGRESS_SOCKET
        gate = GateListener(args.gate, args.gate_port, egress_socket)
    try:
        published = [parse_publish(value) for value in args.publish]
        rules = [parse_rule_option(value) for value in args.publish_rule]
    except (ValueError, PolicyError) as exc:
        parser.error(str(exc))
    if args.terminal_fd is not None:  # never inherited by the command
        os.set_inheritable(args.terminal_fd, False)
    return event_loop.run(
        run(args.upstream_socket, command, gate, published, args.terminal_fd, rules)
    )


if __name__ == "__main__":
    sys.exit(main())
