"""Every JSON input from an untrusted side refuses deep nesting with a clear error,
never a RecursionError; table-driven over every entry point."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import nacl.signing
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from sandbridge.egress import log as egress_log
from sandbridge.exceptions import (
    ApprovalRefused,
    FrameError,
    JsonRefused,
    RegistrationError,
    SandbridgeError,
    WireError,
)
from sandbridge.places import registry as session_registry
from sandbridge.protocol import egress_opening as egress
from sandbridge.protocol import stream, v1
from sandbridge.protocol.auto_registration import parse_unregister_request
from sandbridge.protocol.jsonline import (
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    _finite,
    _no_constant,
    decode_json,
    nesting_refusal,
)
from sandbridge.protocol.registration import parse_register_request
from sandbridge.terminals import approval, control
from sandbridge.terminals.framed_stream import json_body
from sandbridge.terminals.frames import Frame, Kind
from sandbridge.terminals.journal import RecordRing

LEVELS = 100_000


def arrays(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def objects(levels: int) -> bytes:
    return b'{"a":' * levels + b"1" + b"}" * levels


def unbalanced(levels: int) -> bytes:
    return b"[" * levels


NESTINGS = [arrays, objects, unbalanced]


def registration(data: bytes) -> None:
    parse_register_request(data)


def unregistration(data: bytes) -> None:
    # Not JSON, or nested too deeply: left to the registration parser, which refuses it.
    if parse_unregister_request(data) is None:
        parse_register_request(data)


def v1_answer(data: bytes) -> None:
    v1.decode_response(data)


def v1_request(data: bytes) -> None:
    v1.decode_request(data)


def stream_answer(data: bytes) -> None:
    stream.decode_ack(data)


def egress_open(data: bytes) -> None:
    egress.decode_open(data)


def egress_answer(data: bytes) -> None:
    egress.decode_answer(data)


def terminal_frame(data: bytes) -> None:
    json_body(Frame(Kind.READY, data))


def control_answer(data: bytes) -> None:
    control.parse_answer(data)


def signed_request(data: bytes) -> None:
    approval.verify_request({"body": data.decode(), "signature": "00"}, "s", "i")


# entry point, what it raises for a refusal
ENTRY_POINTS: list[tuple[Callable[[bytes], None], type[Exception]]] = [
    (registration, RegistrationError),
    (unregistration, RegistrationError),
    (v1_answer, WireError),
    (v1_request, WireError),
    (stream_answer, WireError),
    (egress_open, WireError),
    (egress_answer, WireError),
    (terminal_frame, FrameError),
    (control_answer, SandbridgeError),
    (signed_request, ApprovalRefused),
]


@pytest.mark.parametrize("nesting", NESTINGS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    ("entry", "refusal"), ENTRY_POINTS, ids=lambda x: getattr(x, "__name__", "")
)
def test_deep_nesting_is_refused_at_every_entry_point(
    entry: Callable[[bytes], None], refusal: type[Exception], nesting: Callable[[int], bytes]
) -> None:
    with pytest.raises(refusal):
        entry(nesting(LEVELS))


@pytest.mark.parametrize("nesting", [arrays, objects], ids=lambda f: f.__name__)
def test_the_refusal_names_the_depth_limit(nesting: Callable[[int], bytes]) -> None:
    with pytest.raises(JsonRefused, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        decode_json(nesting(LEVELS), max_bytes=1 << 30)


def test_registration_refusal_says_why() -> None:
    with pytest.raises(RegistrationError, match="nested deeper than"):
        parse_register_request(arrays(1000))


def test_nesting_up_to_the_limit_is_parsed() -> None:
    assert decode_json(arrays(MAX_JSON_DEPTH)) is not None
    with pytest.raises(JsonRefused):
        decode_json(arrays(MAX_JSON_DEPTH + 1))


@pytest.mark.parametrize(
    "text",
    [
        b'["' + b"[" * 100 + b'"]',  # brackets in a string are not nesting
        b'["\\"' + b"[" * 100 + b'"]',  # nor after an escaped quote
        b'["\\\\", ' + b"[]," * 100 + b"[]]",  # an escaped backslash ends no string early
        b"[" + b"[]," * 10_000 + b"[]]",  # many brackets, shallow
    ],
)
def test_brackets_that_do_not_nest_deeply_are_accepted(text: bytes) -> None:
    assert nesting_refusal(text) is None
    decode_json(text)


def test_an_escaped_backslash_does_not_hide_nesting() -> None:
    assert nesting_refusal(b'["\\\\"' + arrays(100) + b"]") is not None


def test_size_limit_is_refused_before_parsing() -> None:
    with pytest.raises(JsonRefused, match="longer than 10 bytes"):
        decode_json(b"[1,2,3,4,5,6]", max_bytes=10)


def test_records_read_back_from_disk_skip_deep_nesting(tmp_path: Path) -> None:
    (tmp_path / "session.json").write_bytes(objects(LEVELS))
    assert session_registry._read_record(tmp_path) is None
    ring = RecordRing(tmp_path / "ring", max_bytes=1 << 30)
    (ring.path / "000.json").write_bytes(arrays(LEVELS))
    assert ring.records() == []
    (tmp_path / "egress").mkdir()
    (tmp_path / "egress" / egress_log.LOG_NAME).write_bytes(arrays(LEVELS) + b"\n")
    assert egress_log.read_entries(tmp_path / "egress") == []


@pytest.mark.parametrize(
    "number", [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e999"], ids=bytes.decode
)
def test_numbers_that_are_not_json_are_refused(number: bytes) -> None:
    """Python's parser takes them; a browser's JSON.parse does not, and they compare
    false with every bound."""
    with pytest.raises(JsonRefused, match="not valid JSON"):
        decode_json(b'{"created": ' + number + b"}")
    with pytest.raises(RegistrationError):
        parse_register_request(b'{"type":"register","port":' + number + b',"base_path":"/"}')


def test_a_terminal_request_created_at_nan_is_refused() -> None:
    """A sandbox's signed request whose ``created`` was NaN was taken, kept and put in
    the dashboard's tables, which no browser could parse any more."""
    key = nacl.signing.SigningKey.generate()
    document = approval.sign_request(key, "s", "i", "why", float("nan"))
    with pytest.raises(ApprovalRefused):
        approval.verify_request(document, "s", "i")
    good = approval.sign_request(key, "s", "i", "why", 1.5)
    assert approval.verify_request(good, "s", "i").created == 1.5


def _as_json_loads_reads(raw: bytes) -> tuple[str, object]:
    """What ``json.loads`` with decode_json's hooks makes of ``raw``: the twin of its
    shared decoder."""
    try:
        return "parsed", json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return "refused", None


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
_ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le"]


@given(
    st.one_of(
        st.binary(max_size=300),
        st.builds(
            lambda value, encoding: json.dumps(value).encode(encoding),
            _JSON_VALUES,
            st.sampled_from(_ENCODINGS),
        ),
    )
)
def test_decode_json_reads_bytes_as_json_loads_does(raw: bytes) -> None:
    assume(len(raw) <= MAX_JSON_BYTES and nesting_refusal(raw, MAX_JSON_DEPTH) is None)
    expected = _as_json_loads_reads(raw)
    try:
        got: tuple[str, object] = ("parsed", decode_json(raw))
    except JsonRefused:
        got = ("refused", None)
    assert got == expected
