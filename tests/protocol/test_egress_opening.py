"""The host's answer to a gate listener's opening, as both gate listeners read it."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import WireError
from sandbridge.protocol import egress_opening as egress


def _read(*chunks: bytes) -> egress.Answer | None:
    reader = egress.AnswerReader()
    answer = None
    for chunk in chunks:
        answer = reader.feed(chunk)
    return answer


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ((b'{"ok":true}\n',), egress.Answer(None, b"")),
        ((b'{"ok":', b"true}\nHTTP/1.1"), egress.Answer(None, b"HTTP/1.1")),
        ((b'{"ok":false,"error":"no"}\n',), egress.Answer("no", b"")),
        ((b'{"ok":false}\n',), egress.Answer("refused", b"")),
        ((b'{"ok":1}\n',), egress.Answer("refused", b"")),  # only true accepts
        ((b'{"ok":true}', b""), egress.Answer(None, b"")),  # the host closed after it
        ((b'{"ok":tr',), None),
    ],
)
def test_an_answer_is_read_as_it_arrives(
    chunks: tuple[bytes, ...], expected: egress.Answer | None
) -> None:
    assert _read(*chunks) == expected


@pytest.mark.parametrize(
    "chunks",
    [
        (b"not json\n",),
        (b"[true]\n",),
        (b"{" * (egress.MAX_EGRESS_OPEN_BYTES + 1),),
        (b"",),  # closed before answering
    ],
    ids=["not-json", "not-an-object", "too-long", "closed"],
)
def test_what_is_not_an_answer_is_refused(chunks: tuple[bytes, ...]) -> None:
    with pytest.raises(WireError):
        _read(*chunks)
