"""The escape filter: what would make the owner's terminal act beyond its window (the
clipboard, window operations, reports of text the sandbox chose, passthroughs,
programmed keys, host files) never reaches it, in 7-bit and C1 forms; everything else
passes byte for byte, however the output is cut into reads."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbridge.terminals.escape_filter import MAX_HEAD, EscapeFilter

WRITE = b"\x1b]52;c;ZWNobyBwd25lZA==\x07"  # "echo pwned" into the clipboard

DROPPED = [
    # (what the shell printed, what the owner's terminal gets)
    (b"a" + WRITE + b"b", b"ab"),
    (b"a\x1b]52;c;?\x07b", b"ab"),  # a read: the answer would be typed into the sandbox
    (b"a\x1b]52;c;ZWNobw==\x1b\\b", b"ab"),  # ended by ST
    (b"a\xc2\x9d52;c;ZWNobw==\xc2\x9cb", b"ab"),  # C1 OSC and ST as UTF-8
    (b"a\x9d52;c;ZWNobw==\x9cb", b"ab"),  # C1 OSC and ST as raw bytes (8-bit terminals)
    (b"a\x9d52;c;ZWNobw==\x07b", b"ab"),
    (b"\xe0\x9d52;c;ZWNobw==\x07b", b"\xe0b"),  # E0 9D is no character: 9D is OSC
    (b"a\x1b]52;c;ZWNobw==\x9cb", b"ab"),
    (b"a\x1b]52;c;ZWNobw==\x18b", b"ab"),  # CAN cancels the string
    (b"a\x1b]5522;type=write\x07b", b"ab"),  # kitty's clipboard protocol
    (b"a\x1b]52;c;ZWNo\x1b[31mred", b"a\x1b[31mred"),  # an ESC ends it and starts its own
    (b"a\x1b\x07]52;c;ZWNo\x07b", b"ab"),  # a BEL inside ESC ] is executed, not an end
    (b"\x1b]50;?\x07\x1b]50;fixed\x07", b""),  # the font: a query answers with its name
    (b"\x1b]7;file://host/tmp\x07\x1b]1337;File=name=eA==:eA==\x07", b""),  # cwd, iTerm2
    (b"\x1b]9;notify\x07\x1b]99;;hi\x1b\\\x1b]777;notify;a;b\x07\x1b]l title\x07", b""),
    (b"\x1b]5113;ac=send\x07\x1b]I;icon.xpm\x07", b""),  # kitty file transfer, xterm icon
    (b"\x1b]1234567;x\x07", b""),  # a number longer than any OSC's
    # Window operations: iconify, move, resize, raise, maximize; the reports of the icon
    # label and the title, which type the sandbox's text back; the resize to N lines.
    (b"\x1b[2t\x1b[3;0;0t\x1b[4;1;1t\x1b[5t\x1b[8;1;1t\x1b[9;1t\x1b[10;1t", b""),
    (b"a\x1b[21tb\x1b[20tc\x1b[48t\x1b[t", b"abc"),
    (b"a\x9b21tb\xc2\x9b2tc", b"abc"),  # CSI as a raw C1 byte and as UTF-8
    (b"a\x1b[2\x071t", b"a"),  # a BEL among the parameters is executed, not an end
    (b"\x1b[5i\x1b[?4i\x1b[4i", b""),  # media copy: the printer
    # The other resizes: 80/132 columns (DECCOLM, alone or among other modes), columns
    # per page (DECSCPP), lines per screen (DECSNLS).
    (b"a\x1b[?3hb\x1b[?3lc\x1b[?1049;3h\x1b[132$|\x1b[72*|", b"abc"),
    # Passthroughs: tmux (its doubled ESC), screen (any DCS), with OSC 52 inside.
    (b"\x1bPtmux;\x1b\x1b]52;c;ZWNobw==\x07\x1b\\", b"\x1b\\"),
    (b"\x1bP\x1b]52;c;ZWNobw==\x07\x1b\\", b"\x1b\\"),
    (b"\x90tmux;x\x9c\xc2\x90tmux;y\xc2\x9c", b""),  # DCS as C1, raw and as UTF-8
    (b"\x1bP0;1|17/6563686f2070776e6564\x1b\\", b""),  # DECUDK: F6 would type "echo pwned"
    (b'\x1bP@kitty-cmd{"cmd":"launch"}\x1b\\', b""),  # kitty's remote control
    (b"\x1bP1000p%begin\x1b\\", b""),  # iTerm2's tmux integration
    (b"\x1bP$q\x1b]52\x1b\\\x1bP$qlong status\x1b\\", b""),  # echoing status requests
    (b"\x1bP+q6e6f;\xff\x1b\\", b""),  # a terminfo query that is not hex
    # APC, PM, SOS: kitty graphics reading a host file, its temporary file, its memory.
    (b"\x1b_Ga=T,t=f;L2V0Yy9wYXNzd2Q=\x1b\\\x1b_Gt=t;eA==\x1b\\\x1b_Gt=s;eA==\x1b\\", b""),
    (b"\x1b^private\x1b\\\x1bXstring\x1b\\\x9fapc\x9c", b""),
    (b"\x1b%@\x1b%G", b""),  # leaving (or choosing) UTF-8: raw C1 would change meaning
    (b"\x1b" + b"\x00" * (MAX_HEAD + 1) + b"x", b"\x00" * (MAX_HEAD + 1) + b"x"),
]

PASSED = [
    b"plain text\r\n",
    "Ý, ü, 材, 😀: UTF-8 text".encode(),  # C3 9D, E6 9D 90: 0x9D inside characters
    b"\xc3\x9d52;c;ZWNobw==\x07",  # "Ý52;c;...": no OSC here
    b"\xe6\x9d\x90 \xdd\x9d52;x",
    b"\xe2\x9c\x9c\xed\x9f\xbf\xf4\x8f\xbf\xbf",  # 0x9C, 0x9F at the end of characters
    b"\x1b]0;title\x07\x1b]2;\xc3\x9d\xe2\x9c\x9c\x1b\\\x1b]8;;http://x/\x07link\x1b]8;;\x07",
    b"\x1b]11;?\x07\x1b]4;1;rgb:ff/00/00\x07\x1b]104\x07\x1b]133;A\x07\x1b]633;P;k=v\x07",
    b"\x1b[1;31mred\x1b[0m\x1b[2J\x1b[H\x1b[?1049h\x1b[?2004h\x1b[6n\x1b[c\x1b[>c",
    b"\x1b[?30h\x1b[?35l\x1b[3h\x1b[?1;1003h\x1b[3|",  # modes 30, 35, 1003, ANSI 3: no resize
    b"\x1b[14t\x1b[16t\x1b[18t\x1b[22;0t\x1b[23;0t\x1b[>0;1t\x1b[1 t",  # sizes, title stack
    b"\x1b7\x1b8\x1b(0\x1b(B\x1b=\x1b>\x1bc\x1b#8\x1b M\x1bD\x1bM",
    b"\x1bPq#0;2;0;0;0#0!10~\x1b\\",  # a sixel image
    b"\x1bP=1s\x1b\\\x1bP=2s\x1b\\",  # synchronized update
    b"\x1bP$qm\x1b\\\x1bP$q q\x1b\\\x1bP+q544e;636f6c6f7273\x1b\\",  # status, terminfo
    b"\x1b_Ga=T,f=100;iVBORw0KGgo=\x1b\\\x1b_Gi=1,t=d;eA==\x1b\\",  # kitty graphics, inline
    b"\x9b1m\xc2\x9b0m\xc2\x85\x84",  # CSI SGR as C1, NEL as UTF-8, a stray IND
    b"\x07\x05\x1b\\",  # BEL, ENQ, an ST alone
]

CASES = DROPPED + [(printed, printed) for printed in PASSED]


@pytest.mark.parametrize(("printed", "shown"), CASES)
def test_what_acts_beyond_the_window_is_dropped_and_the_rest_passes(
    printed: bytes, shown: bytes
) -> None:
    assert EscapeFilter().feed(printed) == shown


@pytest.mark.parametrize(("printed", "shown"), CASES)
def test_any_cut_into_reads_shows_the_same(printed: bytes, shown: bytes) -> None:
    for cut in range(len(printed) + 1):
        for second in range(cut, len(printed) + 1):
            stream = EscapeFilter()
            parts = (printed[:cut], printed[cut:second], printed[second:])
            assert b"".join(stream.feed(part) for part in parts) == shown, (cut, second)


def test_a_sequence_split_byte_by_byte_never_shows_a_byte_of_it() -> None:
    stream = EscapeFilter()
    printed = b"x" + WRITE + b"\x9d52;c;eA==\x07\x1b[21t\x1bPtmux;\x1b\x1b]52;c;eA==\x07\x1b\\y"
    shown = b"".join(stream.feed(bytes([byte])) for byte in printed)
    assert shown == b"x\x1b\\y"


def test_held_back_at_most_an_unfinished_head() -> None:
    stream = EscapeFilter()
    assert stream.feed(b"a\x1b") == b"a"  # a lone ESC waits for what it starts
    assert stream.feed(b"[0m") == b"\x1b[0m"
    assert stream.feed(b"\xc3") == b""  # half a character waits for the other half
    assert stream.feed(b"\x9d") == b"\xc3\x9d"
    assert stream.feed(b"\x1b[" + b"1;" * MAX_HEAD) == b""  # too long for a head: dropped
    assert stream.feed(b"2t") == b"2t"  # the rest is text: the terminal saw no CSI


def test_a_dropped_string_is_dropped_however_long() -> None:
    stream = EscapeFilter()
    assert stream.feed(b"a\x1b]52;c;") == b"a"
    for _ in range(100):
        assert stream.feed(b"QUFB" * 4096) == b""
    assert stream.feed(b"\x07b") == b"b"


def test_output_without_an_escape_passes_unchanged_and_unheld() -> None:
    stream = EscapeFilter()
    chunk = bytes(range(0x20, 0x7F)) * 200
    assert stream.feed(chunk) is chunk
    text = "ÝÝ材😀".encode() * 1000
    assert stream.feed(text) is text


# Pieces that output is made of: introducers in every form, what goes in heads and
# strings, their ends, UTF-8 characters whose bytes are also C1 controls, stray bytes.
PIECES = st.sampled_from(
    [
        b"\x1b", b"\x1b[", b"\x1b]", b"\x1bP", b"\x1b_", b"\x1b^", b"\x1bX", b"\x1b\\",
        b"\x9b", b"\x9d", b"\x90", b"\x9f", b"\x9c", b"\xc2\x9b", b"\xc2\x9d", b"\xc2\x9c",
        b"\xc2", b"\xc3", b"\xe6", b"\xe0", b"\xf0\x9f", b"\x9d\x90", b"\xbf",
        b"52", b"5522", b"0", b";", b"c;", b"?", b"21", b"8;1;1", b"t", b"m", b"q", b"$q",
        b"+q", b"tmux;", b"G", b"t=f", b"|", b"=1s", b"%G", b" ", b"x", b"\x07", b"\x18",
        b"\x00",
    ]
)  # fmt: skip


@given(st.lists(PIECES, max_size=40), st.integers(min_value=0))
def test_what_is_shown_shows_again_unchanged_and_cuts_change_nothing(
    pieces: list[bytes], cut: int
) -> None:
    # What reaches the terminal is read by it afresh: filtered again, it must all pass
    # (so every sequence in it is one the filter passed, in the terminal's own reading;
    # the newline only ends a character the end of a read would hold back).
    printed = b"".join(pieces)
    shown = EscapeFilter().feed(printed)
    assert EscapeFilter().feed(shown + b"\x1b\\") == shown + b"\x1b\\"
    cut %= len(printed) + 1
    stream = EscapeFilter()
    assert stream.feed(printed[:cut]) + stream.feed(printed[cut:]) == shown


def test_a_string_left_open_at_the_end_is_closed_and_what_was_held_dropped() -> None:
    # An OSC title or sixel the output never ended: the attach client's closing query,
    # then the host shell's output, went into it (as the window's title, say).
    for printed in (b"\x1b]2;title never ended", b"\x1bPq#0;2;0;0;0"):
        escapes = EscapeFilter()
        assert escapes.feed(printed) == printed
        assert escapes.close() == b"\x1b\\"
        assert escapes.feed(b"after") == b"after"
    escapes = EscapeFilter()
    assert escapes.feed(b"text\x1b[1;3") == b"text"  # an unfinished head, held
    assert escapes.close() == b""
    assert escapes.feed(b"1mx") == b"1mx"  # the held head is gone, not completed
