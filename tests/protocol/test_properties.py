"""Property-based tests of the wire decoders: round trips, and only documented errors."""

from __future__ import annotations

import contextlib
import json

from hypothesis import given
from hypothesis import strategies as st

from sandbridge.exceptions import RegistrationError, WireError
from sandbridge.protocol import stream, v1
from sandbridge.protocol.registration import parse_register_request

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=10)
VALUE = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30)


@given(JSON)
def test_registration_decoder_refuses_with_its_own_error_only(value: object) -> None:
    message = value if not isinstance(value, dict) else {"type": "register", **value}
    try:
        request = parse_register_request(json.dumps(message).encode())
    except RegistrationError as refused:
        assert str(refused)
    else:
        assert 1 <= request.port <= 65535 and request.base_path.startswith("/")


@given(JSON)
def test_v1_response_decoder_refuses_with_wire_errors_only(value: object) -> None:
    try:
        response = v1.decode_response(json.dumps(value).encode())
    except WireError:
        return
    assert 200 <= response.status <= 599


@given(
    st.integers(1, 65535),
    st.sampled_from(["/", "/app", "/a/b"]),
    st.sampled_from(["GET", "POST", "DELETE"]),
    st.lists(st.tuples(TOKEN, VALUE), max_size=6),
    st.binary(max_size=300),
)
def test_v1_request_round_trips(
    port: int, base: str, method: str, headers: list[tuple[str, str]], body: bytes
) -> None:
    request = v1.V1Request(
        port, base, method, "/x?y=1", [(n.encode(), v.encode()) for n, v in headers], body
    )
    assert v1.decode_request(v1.encode_request(request).rstrip(b"\n")) == request


@given(
    st.integers(200, 599), st.lists(st.tuples(TOKEN, VALUE), max_size=6), st.binary(max_size=300)
)
def test_v1_response_round_trips(status: int, headers: list[tuple[str, str]], body: bytes) -> None:
    response = v1.V1Response(status, "Reason", [(n.encode(), v.encode()) for n, v in headers], body)
    assert v1.decode_response(v1.encode_response(response).rstrip(b"\n")) == response


@given(JSON)
def test_stream_ack_decoder_raises_wire_errors_only(value: object) -> None:
    with contextlib.suppress(WireError):
        stream.decode_ack(json.dumps(value).encode())
