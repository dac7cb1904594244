"""``--clipboard read|readwrite`` on ``run`` and ``host`` (docs/clipboard.md).

The value's parse is :func:`sandbridge.clipboard.mode.parse_mode`, which the owner's config
key ``clipboard = ...`` (``~/.config/sandbridge/config``) goes through too; the flag wins.
The project's ``.sandbridge/`` never turns it on (its config refuses the key). A session
with the bridge is served by its own process: the question before a read is asked on its
terminal, which the daemon does not have (the run builder and ``_serve_here`` leave such a
run to it).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from sandbridge.clipboard.mode import (
    DEFAULT_WINDOW,
    ClipboardSettings,
    parse_mode,
    parse_window,
)
from sandbridge.exceptions import SandbridgeError
from sandbridge.project.owner_config import read_owner_config
from sandbridge.protocol.contract import CLIPBOARD_SOCKET, SANDBOX_CLIPBOARD_SOCKET


def add_options(parser: argparse.ArgumentParser) -> None:
    """The flags, on ``run`` and ``host``."""
    parser.add_argument(
        "--clipboard",
        metavar="read|readwrite",
        help="let the sandbox read your clipboard once you said yes (and write it, with "
        "readwrite) through wl-paste/wl-copy/xclip/xsel stand-ins; off by default",
    )
    parser.add_argument(
        "--clipboard-window",
        metavar="SECONDS",
        help=f"how long one yes allows clipboard reads (default {DEFAULT_WINDOW:g})",
    )
    parser.add_argument(
        "--clipboard-preapprove",
        action="store_true",
        help="allow every clipboard read without asking (each is still logged and shown)",
    )


def _chosen(args: argparse.Namespace) -> tuple[str, str] | None:
    """The mode and where it came from: the flag, else the owner's config
    (``clipboard = ...``), else ``None`` (the bridge is off)."""
    if args.clipboard is not None:
        return args.clipboard, "--clipboard"
    line = read_owner_config(os.environ).clipboard
    return None if line is None else (line.value, line.source)


def is_on(args: argparse.Namespace) -> bool:
    """Whether the session has the bridge (the flag, or the owner's config)."""
    return _chosen(args) is not None


def settings_of(args: argparse.Namespace) -> ClipboardSettings | None:
    """The session's clipboard settings (None: the bridge is off); refuses a malformed
    value, or a window or preapproval without the bridge."""
    chosen = _chosen(args)
    if chosen is None:
        if args.clipboard_window is not None or args.clipboard_preapprove:
            raise SandbridgeError(
                "--clipboard-window and --clipboard-preapprove need --clipboard read or "
                "--clipboard readwrite (or clipboard = ... in your config)"
            )
        return None
    mode = parse_mode(*chosen)
    window = DEFAULT_WINDOW
    if args.clipboard_window is not None:
        window = parse_window(args.clipboard_window)
    return ClipboardSettings(mode, window, args.clipboard_preapprove)


def policy_lines(args: argparse.Namespace) -> list[str]:
    """What ``--print-policy`` says of the bridge."""
    settings = settings_of(args)
    if settings is None:
        return [
            "clipboard: off (--clipboard read|readwrite, or clipboard = ... in your config, "
            "turns it on)"
        ]
    reads = (
        "every read allowed without asking (--clipboard-preapprove)"
        if settings.preapproved
        else f"reads after the owner's yes, for {settings.window:g} s each"
    )
    writes = "writes allowed" if settings.writes else "writes refused"
    return [
        f"clipboard: {settings.mode.value} at {SANDBOX_CLIPBOARD_SOCKET} ({_source(args)}): "
        f"{reads}; {writes}; text and PNG only; each transfer logged"
    ]


def _source(args: argparse.Namespace) -> str:
    chosen = _chosen(args)
    return "" if chosen is None else chosen[1]


def host_lines(args: argparse.Namespace, runtime_dir: Path) -> list[str]:
    """What ``sandbridge host`` says of the bridge: another runtime's sandbox has no
    stand-ins of sandbridge's entry, so it is told how to run them."""
    if not is_on(args):
        return []
    return [
        f"sandbridge: clipboard on {runtime_dir / CLIPBOARD_SOCKET}; inside, run "
        "python3 -m sandbridge.clipboard.inside xclip|xsel|wl-paste|wl-copy ARGS..."
    ]
