"""The command line's parser class: every command's ``--help`` describes it, and a flag
renamed keeps its old name as a hidden, deprecated alias.

A command added with ``help=`` only (the line ``sandbridge --help`` lists) had an empty
``sandbridge COMMAND --help``: here its description is that line unless it has one of
its own. ``tests/cli/test_sessions.py`` walks the whole tree for it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subcommands whose description is their help line unless given."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if kwargs.get("description") is None:
            kwargs["description"] = kwargs.get("help")
        parser: argparse.ArgumentParser = super().add_parser(name, **kwargs)
        return parser


class CommandParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose subcommands (parsers of this class too) are described."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Commands)


class _Deprecated(argparse.Action):
    """A flag's old name: stores into the new one's ``dest`` and says once on stderr to
    use the new name (scripts that use the old one keep working)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        self.instead: str = kwargs.pop("instead")
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        print(
            f"sandbridge: {option_string} is deprecated: use {self.instead} (same value)",
            file=sys.stderr,
            flush=True,
        )
        setattr(namespace, self.dest, values)


def add_deprecated_alias(parser: argparse.ArgumentParser, old: str, new: str, dest: str) -> None:
    """Accept ``old`` as a hidden alias of the flag ``new`` (stored in ``dest``)."""
    parser.add_argument(old, dest=dest, action=_Deprecated, instead=new, default=argparse.SUPPRESS)
