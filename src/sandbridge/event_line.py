"""One structured event as a line of text: its name, then each field as ``key=repr``.

:mod:`sandbridge.log` logs events in this form; a process that must not load
``logging`` (the sandbox entry, under its memory bound) writes them to stderr with
:func:`warn`, in the form ``logging`` prints them there when no handler is set up.
"""

from __future__ import annotations

import sys


def event_line(name: str, fields: dict[str, object]) -> str:
    """``name key=value ...``, each value as its ``repr``."""
    return " ".join([name] + [f"{key}={value!r}" for key, value in fields.items()])


def warn(name: str, **fields: object) -> None:
    """Write a warning event to stderr (never a secret, body or terminal byte)."""
    sys.stderr.write(event_line(name, fields) + "\n")
    sys.stderr.flush()
