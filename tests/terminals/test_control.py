"""Naming a session and a request, here or on a connected far machine (terminals/control.py)."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import SandbridgeError
from sandbridge.terminals.control import Place, first_line, parse_place, parse_request_id


def test_a_session_is_local_unless_a_machine_prefixes_it() -> None:
    assert parse_place("web") == Place(None, "web")
    assert parse_place("box:s-1a2b3c") == Place("box", "s-1a2b3c")
    assert str(parse_place("box:web")) == "box:web"


def test_a_far_request_id_keeps_the_id_its_session_knows() -> None:
    assert parse_request_id("web:0123abcd") == (Place(None, "web"), "web:0123abcd")
    place, far_id = parse_request_id("box:web:0123abcd")
    assert (place, far_id) == (Place("box", "web"), "web:0123abcd")
    assert place.request_id(far_id) == "box:web:0123abcd"


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        ("box:web:0123ABCD", "expected SESSION:XXXXXXXX or HOST:SESSION:XXXXXXXX"),
        ("web:0123abc", "expected SESSION:XXXXXXXX"),
        ("0123abcd", "expected SESSION:XXXXXXXX"),
        ("a:b:web:0123abcd", "'a:b'"),
        ("Box:web:0123abcd", "'Box'"),
        (":web:0123abcd", "machine ''"),
    ],
)
def test_a_malformed_request_id_is_refused_naming_it(text: str, refusal: str) -> None:
    with pytest.raises(SandbridgeError, match=refusal):
        parse_request_id(text)


def test_only_a_far_session_sends_a_first_line() -> None:
    assert first_line(Place(None, "web")) == b""
    assert first_line(Place("box", "web")) == b'{"session": "web"}\n'
