"""Text the sandbox or a project wrote, made safe for the owner's terminal and files.

What the egress requests, the survey, the protected paths and the dashboard show of such
text goes through :func:`shown` (or :func:`quoted`): on the ground floor, so that each
imports it without the machinery of the module it was first written for.
"""

from __future__ import annotations


def hidden(char: str) -> bool:
    """Never written raw to a terminal or a file: Python's non-printable characters are
    the controls (C0, C1, DEL), format characters (bidi overrides, zero-width),
    surrogates, private use, unassigned, every space but ' ', and the line and paragraph
    separators (at which ``str.splitlines`` breaks lines)."""
    return not char.isprintable()


def shown(text: str) -> str:
    """``text`` safe for the owner's terminal: every non-printable character (ESC, CR,
    LF, bidi overrides, odd spaces...) escaped as ``\\xNN`` / ``\\uNNNN``, and
    backslashes doubled so an escape cannot be forged by typing one."""
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif hidden(char):
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def quoted(text: str) -> str:
    """``text`` :func:`shown`, in double quotes, its own double quotes escaped: what the
    sandbox wrote can neither end the quotation nor look like sandbridge's own words."""
    return '"' + shown(text).replace('"', '\\"') + '"'
