"""One JSON object per line, with a hard limit before buffering."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import WireError
from sandbridge.protocol.jsonline import LineReader, decode_object, encode_object


def test_line_split_across_feeds_is_joined() -> None:
    reader = LineReader(100)
    assert reader.feed(b'{"a":') is None
    assert reader.feed(b"1}\nrest") == b'{"a":1}'
    assert reader.rest == b"rest"


def test_line_over_the_limit_is_refused_before_the_newline() -> None:
    reader = LineReader(10)
    reader.feed(b"12345")
    with pytest.raises(WireError, match="longer than 10"):
        reader.feed(b"678901")


def test_eof_ends_a_message_without_newline() -> None:
    reader = LineReader(100)
    reader.feed(b"{}")
    assert reader.feed_eof() == b"{}"


def test_eof_with_nothing_sent_is_an_error() -> None:
    with pytest.raises(WireError, match="before a message"):
        LineReader(10).feed_eof()


def test_encoded_object_round_trips_as_one_line() -> None:
    line = encode_object({"a": "x\ny"})
    assert line.count(b"\n") == 1
    assert decode_object(line.rstrip(b"\n")) == {"a": "x\ny"}
