"""Whether one path lies at or below another, as ``PurePath.is_relative_to`` says, from
the parts both paths hold already.

A session's start asks it hundreds of times (each candidate protected path against each
mount, each ``PATH`` entry against each writable place, each view against the binds), and
Python 3.11's ``is_relative_to`` parses its argument anew on each call: that parsing was
most of a start's decision of what to protect.
"""

from __future__ import annotations

from pathlib import PurePath


def is_within(path: PurePath, top: PurePath) -> bool:
    """``path.is_relative_to(top)``: ``top``'s parts begin ``path``'s."""
    parts = top.parts
    if not parts:  # "" or ".": every relative path is within it, no absolute one
        return not path.anchor
    return path.parts[: len(parts)] == parts
