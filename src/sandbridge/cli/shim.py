"""``sandbridge shim``: the sandbox side inside a sandbox another runtime starts.

It serves ``upstream.sock`` (the relay's shim), and on request the egress gate's
listeners (``--gate-port``) and terminal workers (``--terminals``: ``terminal.sock``),
all in the runtime dir the container mounts (docs/external-runtimes.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from sandbridge.aio import event_loop
from sandbridge.aio.tasks import running
from sandbridge.protocol.contract import (
    DEFAULT_UPSTREAM_SOCKET,
    EGRESS_SOCKET,
    PROXY_PORT,
    TERMINAL_SOCKET,
    UPSTREAM_SOCKET_ENV,
)


def add_shim(shim: argparse.ArgumentParser) -> None:
    """``sandbridge shim``'s arguments."""
    shim.add_argument(
        "--socket",
        default=os.environ.get(UPSTREAM_SOCKET_ENV, DEFAULT_UPSTREAM_SOCKET),
        help="where to listen (default: $AGS_WEBVIEW_RELAY_UPSTREAM_SOCKET)",
    )
    shim.add_argument(
        "--gate-port",
        type=int,
        action="append",
        default=[],
        metavar="PORT",
        help="bridge GATE-ADDR:PORT to the host's egress gate (sandbridge host --egress), "
        f"one per gate port: the proxy's {PROXY_PORT} and each host service's",
    )
    shim.add_argument(
        "--gate-addr", default="127.0.0.1", help="where --gate-port listens (default 127.0.0.1)"
    )
    shim.add_argument(
        "--terminals",
        action="store_true",
        help=f"start owner-approved terminals here: serve {TERMINAL_SOCKET} beside --socket "
        "for sandbridge host (docs/terminals.md)",
    )
    shim.add_argument("-v", "--verbose", action="store_true", help="log debug events")
    shim.set_defaults(func=cmd_shim)


def _say(text: str) -> None:
    print(f"sandbridge: {text}", file=sys.stderr, flush=True)


def cmd_shim(args: argparse.Namespace) -> int:
    from sandbridge.egress.gate_listener import GateListener
    from sandbridge.relay.inside.shim import Shim
    from sandbridge.terminals.starter import bind_terminal_socket, serve_terminal_socket

    socket_path = Path(args.socket)

    async def serve() -> int:
        stopped = event_loop.stop_signals()
        shim = Shim(socket_path)
        await shim.start()
        _say(f"shim listening on {socket_path}")
        gate = None
        helpers: list[Coroutine[Any, Any, None]] = []
        try:
            if args.gate_port:
                egress = socket_path.parent / EGRESS_SOCKET
                gate = GateListener(args.gate_addr, args.gate_port, egress)
                await gate.start()
                ports = ", ".join(map(str, args.gate_port))
                _say(f"gate on {args.gate_addr} ports {ports} -> {egress}")
            if args.terminals:
                terminals = socket_path.parent / TERMINAL_SOCKET
                listener = bind_terminal_socket(terminals)
                helpers.append(serve_terminal_socket(listener, terminals))
                _say(f"terminal workers start on {terminals}")
            async with running(*helpers):
                return await stopped
        finally:
            if gate is not None:
                await gate.close()
            await shim.close()

    return event_loop.run(serve())
