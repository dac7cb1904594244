"""``sandbridge completions bash|zsh|fish``: the shell's completion script, generated from
the command line's own parser by shtab (never written by hand: a new option completes as
soon as it is parsed). ``./dev.sh install`` puts each where its shell looks."""

from __future__ import annotations

import argparse

from sandbridge.cli.parser import build_parser

SHELLS = ("bash", "zsh", "fish")


def add_completions(completions: argparse.ArgumentParser) -> None:
    """``sandbridge completions``'s arguments."""
    completions.description = (
        "Print the completion script of SHELL, generated from sandbridge's "
        "parser. bash: save it as ~/.local/share/bash-completion/completions/sandbridge; "
        "zsh: as _sandbridge in a directory on fpath; fish: as "
        "~/.config/fish/completions/sandbridge.fish (./dev.sh install does all three)."
    )
    completions.add_argument("shell", choices=SHELLS, help="the shell")
    completions.set_defaults(func=cmd_completions)


def cmd_completions(args: argparse.Namespace) -> int:
    import shtab  # only here: no other command needs it

    # The whole command line, every command's arguments (the parser of a command asked
    # has the others' names alone).
    print(shtab.complete(build_parser(), shell=args.shell), end="")
    return 0
