"""The clipboard filter: OSC 52 (and kitty's 5522) never reach the owner's terminal;
everything else passes byte for byte, however the output is cut into reads."""

from __future__ import annotations

import pytest

from sandbridge.terminals.clipboard_filter import ClipboardFilter

WRITE = b"\x1b]52;c;ZWNobyBwd25lZA==\x07"  # "echo pwned" into the clipboard

CASES = [
    # (what the shell printed, what the owner's terminal gets)
    (b"plain text\r\n", b"plain text\r\n"),
    (b"a" + WRITE + b"b", b"ab"),
    (b"a\x1b]52;c;?\x07b", b"ab"),  # a read: the answer would be typed into the sandbox
    (b"a\x1b]52;c;ZWNobw==\x1b\\b", b"ab"),  # ended by ST
    (b"a\xc2\x9d52;c;ZWNobw==\xc2\x9cb", b"ab"),  # C1 OSC and ST as UTF-8
    (b"a\x1b]52;c;ZWNobw==\x9cb", b"ab"),
    (b"a\x1b]52;c;ZWNobw==\x18b", b"ab"),  # CAN cancels the string
    (b"a\x1b]5522;type=write\x07b", b"ab"),  # kitty's clipboard protocol
    (b"a\x1b]52;c;ZWNo\x1b[31mred", b"a\x1b[31mred"),  # an ESC ends it and starts its own
    (b"\x1bPtmux;\x1b\x1b]52;c;ZWNobw==\x07\x1b\\", b"\x1bPtmux;\x1b\x1b\\"),  # passthrough
    (b"\x1b]0;title\x07\x1b]8;;http://x/\x07link\x1b]8;;\x07", None),  # not the clipboard
    (b"\x1b]11;?\x07\x1b]521;x\x07\x1b]5;x\x07\x1b]52", None),  # held: may be 52 still
    (b"\x1b]52123;x\x07", None),  # a longer number is another OSC
    (b"\xe6\x9d\x90 \xdd\x9d52;x", None),  # 0x9D inside characters is no introducer
]


@pytest.mark.parametrize(("printed", "shown"), CASES)
def test_clipboard_sequences_are_dropped_and_the_rest_passes(
    printed: bytes, shown: bytes | None
) -> None:
    expected = printed if shown is None else shown
    if printed.endswith(b"\x1b]52"):
        expected = printed[: -len(b"\x1b]52")]
    assert ClipboardFilter().feed(printed) == expected


@pytest.mark.parametrize(("printed", "shown"), CASES)
def test_any_cut_into_reads_shows_the_same(printed: bytes, shown: bytes | None) -> None:
    whole = ClipboardFilter().feed(printed)
    for cut in range(len(printed) + 1):
        for second in range(cut, len(printed) + 1):
            stream = ClipboardFilter()
            parts = (printed[:cut], printed[cut:second], printed[second:])
            assert b"".join(stream.feed(part) for part in parts) == whole, (cut, second)


def test_a_sequence_split_byte_by_byte_never_shows_a_byte_of_it() -> None:
    stream = ClipboardFilter()
    shown = b"".join(stream.feed(bytes([byte])) for byte in b"x" + WRITE * 3 + b"y")
    assert shown == b"xy"


def test_output_without_an_escape_passes_unchanged_and_unheld() -> None:
    stream = ClipboardFilter()
    chunk = bytes(range(0x20, 0x7F)) * 200
    assert stream.feed(chunk) == chunk
    assert stream.feed(b"\x1b") == b""  # a lone ESC waits for what it starts
    assert stream.feed(b"[0m") == b"\x1b[0m"
