"""The outer framing: lengths checked before bodies, kinds per peer."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import FrameError
from sandbridge.terminals import frames
from sandbridge.terminals.frames import Frame, FrameDecoder, Kind

ALL = frozenset(Kind)


def test_frames_split_across_reads_are_reassembled() -> None:
    data = frames.encode(Kind.CIPHER, b"abc") + frames.encode(Kind.LEASE, b"{}")
    decoder = FrameDecoder(ALL)
    got = [frame for byte in data for frame in decoder.feed(bytes([byte]))]
    assert got == [Frame(Kind.CIPHER, b"abc"), Frame(Kind.LEASE, b"{}")]
    decoder.feed_eof()


@pytest.mark.parametrize(
    ("data", "allowed", "error"),
    [
        (b"\x09\0\0\0\0", ALL, "unknown frame kind 9"),
        (frames.encode(Kind.LEASE, b"{}"), frozenset({Kind.CIPHER}), "not allowed"),
        (
            bytes([Kind.CIPHER]) + (frames.MAX_BODY[Kind.CIPHER] + 1).to_bytes(4, "big"),
            ALL,
            "declares",
        ),
        (bytes([Kind.STOP]) + (1 << 31).to_bytes(4, "big"), ALL, "declares"),
    ],
)
def test_bad_frames_are_refused_from_the_header_alone(
    data: bytes, allowed: frozenset[Kind], error: str
) -> None:
    with pytest.raises(FrameError, match=error):
        FrameDecoder(allowed).feed(data)


def test_end_of_stream_inside_a_frame_is_refused() -> None:
    decoder = FrameDecoder(ALL)
    decoder.feed(frames.encode(Kind.CIPHER, b"abcdef")[:7])
    with pytest.raises(FrameError, match="inside a frame"):
        decoder.feed_eof()


def test_oversized_bodies_are_never_encoded() -> None:
    with pytest.raises(FrameError):
        frames.encode(Kind.READY, b"x" * (frames.MAX_CONTROL_BODY + 1))
