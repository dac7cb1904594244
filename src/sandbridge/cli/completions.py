"""``sandbridge completions bash|zsh|fish``: the shell's completion script, generated from
the command line's own parser by shtab (never written by hand: a new option completes as
soon as it is parsed). ``./dev.sh install`` puts each where its shell looks."""

from __future__ import annotations

import argparse
from typing import Any

SHELLS = ("bash", "zsh", "fish")


def add_command(commands: Any, root: argparse.ArgumentParser) -> None:
    """The ``completions`` command, which completes ``root`` (the whole command line)."""
    completions = commands.add_parser(
        "completions",
        help="print the shell completion script for bash, zsh or fish",
        description="Print the completion script of SHELL, generated from sandbridge's "
        "parser. bash: save it as ~/.local/share/bash-completion/completions/sandbridge; "
        "zsh: as _sandbridge in a directory on fpath; fish: as "
        "~/.config/fish/completions/sandbridge.fish (./dev.sh install does all three).",
    )
    completions.add_argument("shell", choices=SHELLS, help="the shell")
    completions.set_defaults(func=cmd_completions, root_parser=root)


def cmd_completions(args: argparse.Namespace) -> int:
    import shtab  # only here: no other command needs it

    print(shtab.complete(args.root_parser, shell=args.shell), end="")
    return 0
