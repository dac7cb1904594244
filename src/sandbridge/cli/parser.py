"""The ``sandbridge`` command line's parser, built for the one command asked, and the
call that carries a parsed command out (``main.py`` comes here for every command but a
thin ``run``; the daemon's run builder too).

A command's module imports what its handler needs: a session's (the event loop, the
relay, the sandbox), the survey, the dashboard. :data:`COMMANDS` names each command, its
one-line help and the function in its module that adds its arguments; the parser imports
the module of the command asked and no other, and lists the others by name and help line
alone, which is all ``sandbridge --help`` and argparse's "invalid choice" error show of
them. So ``sandbridge ls`` or ``sandbridge terminal key`` costs its own imports only
(``tests/cli/test_parser.py`` holds the light commands to that).
"""

from __future__ import annotations

import argparse
import importlib
import resource
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from sandbridge import __version__, log
from sandbridge.cli.command_parser import CommandParser
from sandbridge.exceptions import SandbridgeError

if TYPE_CHECKING:  # the module of run, demo and host is a session's, imported for those alone
    import contextlib

    from sandbridge.cli.sessions import SessionRunner


class Command(NamedTuple):
    """One command: its name, its line in ``sandbridge --help``, and where its arguments
    are added (``MODULE:FUNCTION`` under ``sandbridge.cli``, called with its parser)."""

    name: str
    help: str
    adder: str


# In the order ``sandbridge --help`` lists them.
COMMANDS = (
    Command("run", "run a command in a sandbox with an app relay", "sessions:add_run"),
    Command("demo", "serve the bundled demo app from a sandbox", "sessions:add_demo"),
    Command(
        "host",
        "serve the relay for a sandbox another runtime starts (podman, docker)",
        "sessions:add_host",
    ),
    Command("ls", "list running sessions and their apps", "ls:add_ls"),
    Command("status", "summarise a running session's egress decisions", "status:add_status"),
    Command("shim", "run the shim inside a sandbox another runtime starts", "shim:add_shim"),
    Command(
        "policy",
        "survey a project and write its first network policy (docs/policy.md)",
        "policy:add_policy",
    ),
    Command("terminal", "owner-approved terminals into a session", "terminal:add_terminal"),
    Command("shell", "owner: approve and open a terminal in one step", "terminal:add_shell"),
    Command("egress", "answer the sandbox's egress requests", "egress:add_egress"),
    Command(
        "daemon",
        "serve every session of this user from one process (docs/daemon.md)",
        "daemon:add_daemon",
    ),
    Command(
        "doctor",
        "say what works on this machine and what does not, with fixes (docs/doctor.md)",
        "doctor:add_doctor",
    ),
    Command("ui", "the dashboard: sessions, apps, terminals, egress", "ui:add_ui"),
    Command(
        "connect",
        "serve a far machine's apps as local origins (docs/remote.md)",
        "remote:add_connect",
    ),
    Command(
        "serve-stdio",
        "the far machine's end of sandbridge connect, on stdin and stdout",
        "remote:add_serve_stdio",
    ),
    Command(
        "agents",
        "list the agent profiles for run --agent, their commands and state",
        "agents:add_agents",
    ),
    Command(
        "completions",
        "print the shell completion script for bash, zsh or fish",
        "completions:add_completions",
    ),
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser. With ``command`` (the word naming the command, or one
    naming none: ``--help``, a typo), that command's arguments in full and every other
    command by name and help line; without, every command in full (the completions, and
    whatever walks the whole tree)."""
    parser = CommandParser(
        prog="sandbridge", description="Narrow, audited bridges across a Linux sandbox boundary."
    )
    parser.add_argument("--version", action="version", version=f"sandbridge {__version__}")
    commands = parser.add_subparsers(dest="subcommand", required=True)
    for entry in COMMANDS:
        sub = commands.add_parser(entry.name, help=entry.help)
        if command is None or command == entry.name:
            _adder(entry)(sub)
    return parser


def _adder(entry: Command) -> Callable[[argparse.ArgumentParser], None]:
    module, function = entry.adder.split(":")
    adder: Callable[[argparse.ArgumentParser], None] = getattr(
        importlib.import_module(f"sandbridge.cli.{module}"), function
    )
    return adder


def command_word(words: list[str]) -> str:
    """The word of ``words`` that names the command: the first that is not an option (the
    top level's options, ``--help`` and ``--version``, take no value)."""
    return next((word for word in words if not word.startswith("-")), "")


def _raise_descriptor_limit() -> None:
    """Use the hard limit of open files: every relayed connection takes two."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: list[str] | None = None) -> int:
    """The full command line: parse ``argv`` (default: the process's), carry it out."""
    words = sys.argv[1:] if argv is None else argv
    return run_parsed(build_parser(command_word(words)).parse_args(words))


def run_parsed(
    args: argparse.Namespace,
    session_runner: SessionRunner | None = None,
    after_exit: contextlib.ExitStack | None = None,
) -> int:
    """Carry out a parsed command line; a ``run``'s session is served by
    ``session_runner`` if given (the daemon's run builder), and what a run may leave
    until its client has exited (its placeholders' removal) goes to ``after_exit``."""
    args.session_runner = session_runner
    args.after_exit = after_exit
    _raise_descriptor_limit()
    log.setup(verbose=getattr(args, "verbose", False), is_log=getattr(args, "stderr_is_log", False))
    try:
        return int(args.func(args))
    except SandbridgeError as exc:
        print(f"sandbridge: {exc}", file=sys.stderr)
        return 2
