"""The clipboard socket's wire (protocol/clipboard.py): every request and answer shape,
and every hostile header or body refused with a message naming what was wrong."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import WireError
from sandbridge.protocol import clipboard as wire

PNG_BYTES = wire.PNG_SIGNATURE + b"\x00\x00\x00\rIHDR"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'{"op":"read","type":"text/plain"}', wire.ClipboardRequest("read", "text/plain")),
        (b'{"op":"read","type":"image/png"}', wire.ClipboardRequest("read", "image/png")),
        (
            b'{"op":"write","type":"image/png","size":16}',
            wire.ClipboardRequest("write", "image/png", 16),
        ),
        (b'{"op":"types"}', wire.ClipboardRequest("types")),
    ],
)
def test_a_well_formed_request_is_parsed(line: bytes, expected: wire.ClipboardRequest) -> None:
    assert wire.parse_request(line) == expected
    assert wire.parse_request(wire.encode_request(expected).rstrip(b"\n")) == expected


@pytest.mark.parametrize(
    ("line", "refusal"),
    [
        (b'{"op":"delete","type":"text/plain"}', "op 'delete' is not served"),
        (b'{"type":"text/plain"}', "op None is not served"),
        (b'{"op":"read","type":"text/html"}', "type 'text/html' is not served"),
        (b'{"op":"read","type":"image/svg+xml"}', "type 'image/svg+xml' is not served"),
        (b'{"op":"read"}', "type None is not served"),
        (b'{"op":"write","type":"text/plain"}', "size None is not a byte count"),
        (b'{"op":"write","type":"text/plain","size":-1}', "size -1 is not a byte count"),
        (b'{"op":"write","type":"text/plain","size":true}', "size True is not a byte count"),
        (b'{"op":"write","type":"text/plain","size":1.5}', "size 1.5 is not a byte count"),
        (
            b'{"op":"write","type":"text/plain","size":1048577}',
            "size 1048577 is over the 1048576 bytes of text/plain",
        ),
        (
            b'{"op":"write","type":"image/png","size":16777217}',
            "size 16777217 is over the 16777216 bytes of image/png",
        ),
        (b'{"op":"read","type":"text/plain","size":3}', "field 'size' is not part of a read"),
        (b'{"op":"types","path":"/etc"}', "field 'path' is not part of a types"),
        (b"[1]", "must be a JSON object"),
        (b"not json", "not valid JSON"),
        (b'{"op":"read","type":"' + b"x" * 300 + b'"}', "longer than 256 bytes"),
    ],
)
def test_a_hostile_request_is_refused_by_name(line: bytes, refusal: str) -> None:
    with pytest.raises(WireError) as caught:
        wire.parse_request(line)
    assert refusal in str(caught.value)


@pytest.mark.parametrize(
    ("kind", "data", "refusal"),
    [
        ("image/png", b"GIF89a....", "do not start with the PNG signature"),
        ("image/png", b"", "do not start with the PNG signature"),
        ("image/png", b"<svg onload=alert(1)>", "do not start with the PNG signature"),
        ("text/plain", b"caf\xe9", "not UTF-8 (byte 3: b'\\xe9')"),
        ("text/plain", b"\xff\xfe", "not UTF-8 (byte 0"),
        ("text/plain", b"x" * (wire.MAX_BYTES["text/plain"] + 1), "over its cap of 1048576"),
    ],
)
def test_content_that_is_not_what_it_claims_is_refused(
    kind: str, data: bytes, refusal: str
) -> None:
    why = wire.content_refusal(kind, data)
    assert why is not None
    assert refusal in why


@pytest.mark.parametrize(
    ("kind", "data"),
    [("image/png", PNG_BYTES), ("text/plain", "naïve ✓\n".encode()), ("text/plain", b"")],
)
def test_a_real_png_and_utf8_text_may_cross(kind: str, data: bytes) -> None:
    assert wire.content_refusal(kind, data) is None


@pytest.mark.parametrize(
    "answer",
    [
        wire.ClipboardAnswer(True, "text/plain", 5),
        wire.ClipboardAnswer(True, types=("text/plain", "image/png")),
        wire.ClipboardAnswer(True),
        wire.ClipboardAnswer(False, error="the owner did not allow reading the clipboard"),
    ],
)
def test_an_answer_reads_back_as_written(answer: wire.ClipboardAnswer) -> None:
    assert wire.parse_answer(wire.encode_answer(answer).rstrip(b"\n")) == answer


def test_an_answer_with_a_type_not_served_is_refused() -> None:
    with pytest.raises(WireError, match="type 'text/html' is not served"):
        wire.parse_answer(b'{"ok":true,"type":"text/html","size":3}')


def test_a_body_longer_than_its_declared_size_is_refused() -> None:
    body = wire.BodyReader(3)
    body.feed(b"ab")
    with pytest.raises(WireError, match="more bytes than the declared size of 3"):
        body.feed(b"cd")


def test_a_body_shorter_than_its_declared_size_is_refused_at_its_end() -> None:
    body = wire.BodyReader(5)
    body.feed(b"abc")
    with pytest.raises(WireError, match="3 bytes arrived of the declared size 5"):
        body.finish()


def test_a_body_of_exactly_its_size_is_whole() -> None:
    body = wire.BodyReader(4)
    body.feed(b"ab")
    body.feed(b"cd")
    assert body.finish() == b"abcd"
