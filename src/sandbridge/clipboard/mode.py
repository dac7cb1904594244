"""What a session's clipboard bridge may do (``--clipboard``), as a pure parse.

``read``: the sandbox may read the owner's clipboard, each time within a window the
owner opened by answering yes (or every time, with ``--clipboard-preapprove``); writes
are refused. ``readwrite``: writes land on the owner's clipboard too, without asking.
:func:`parse_mode` is the one parser of the flag and of the owner's config key
``clipboard = read|readwrite`` (to be read by the owner's config reader); the project's
``.sandbridge/config`` never turns the bridge on.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sandbridge.exceptions import PolicyError

# How long one yes allows reads: long enough for an agent to paste a screenshot and a
# snippet the owner just copied, short enough that what the owner copies next (a
# password from a manager) is not read without a new question.
DEFAULT_WINDOW = 120.0
# Past an hour a window is not "the next few pastes"; --clipboard-preapprove says that.
MAX_WINDOW = 3600.0


class ClipboardMode(enum.Enum):
    """The flag's values."""

    READ = "read"
    READWRITE = "readwrite"


@dataclass(frozen=True, slots=True)
class ClipboardSettings:
    """A session's clipboard bridge: its mode, the window one yes opens (seconds), and
    whether reads are allowed without asking."""

    mode: ClipboardMode
    window: float = DEFAULT_WINDOW
    preapproved: bool = False

    @property
    def writes(self) -> bool:
        """Whether the sandbox may write the owner's clipboard."""
        return self.mode is ClipboardMode.READWRITE


def parse_mode(value: str, source: str = "--clipboard") -> ClipboardMode:
    """The mode ``value`` names; ``source`` names where it came from in a refusal."""
    try:
        return ClipboardMode(value.strip())
    except ValueError:
        raise PolicyError(
            f"{source} {value!r}: not a clipboard mode; use read or readwrite"
        ) from None


def parse_window(value: str, source: str = "--clipboard-window") -> float:
    """The window ``value`` names in seconds (above 0, at most :data:`MAX_WINDOW`)."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_WINDOW:
        raise PolicyError(
            f"{source} {value!r}: not a number of seconds from 0 to {MAX_WINDOW:g}; "
            "--clipboard-preapprove allows every read"
        )
    return seconds
