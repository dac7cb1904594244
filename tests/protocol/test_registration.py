"""The registration message: the contract's field names, every refusal with its value."""

from __future__ import annotations

import json

import pytest

from sandbridge.exceptions import RegistrationError
from sandbridge.protocol.registration import (
    encode_register_error,
    encode_register_ok,
    normalize_base_path,
    parse_register_request,
)


def test_contract_request_is_accepted() -> None:
    request = parse_register_request(b'{"type":"register","port":4173,"base_path":"/"}')
    assert (request.port, request.base_path) == (4173, "/")


def test_base_path_defaults_to_root() -> None:
    assert parse_register_request(b'{"type":"register","port":80}').base_path == "/"


def test_success_answer_has_the_contract_fields_exactly() -> None:
    answer = json.loads(encode_register_ok(43125, "/"))
    assert answer == {
        "ok": True,
        "host_port": 43125,
        "base_path": "/",
        "url": "http://127.0.0.1:43125/",
    }


def test_success_answer_under_a_base_path_has_no_trailing_slash() -> None:
    assert json.loads(encode_register_ok(43126, "/app"))["url"] == "http://127.0.0.1:43126/app"


def test_error_answer_is_ok_false_with_error() -> None:
    assert json.loads(encode_register_error("bad")) == {"ok": False, "error": "bad"}


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        (b'{"type":"register","port":0}', "got 0"),
        (b'{"type":"register","port":65536}', "got 65536"),
        (b'{"type":"register","port":-1}', "got -1"),
        (b'{"type":"register","port":"80"}', "got '80'"),
        (b'{"type":"register","port":80.5}', "got 80.5"),
        (b'{"type":"register","port":true}', "got True"),
        (b'{"type":"register","port":null}', "got None"),
        (b'{"type":"register"}', "port is missing"),
        (b'{"type":"unregister","port":80}', "type must be 'register', got 'unregister'"),
        (b'{"port":80}', "got None"),
        (b"[1,2]", "JSON object"),
        (b"not json", "not valid JSON"),
        (b'{"type":"register","port":80,"base_path":"app"}', "'app'"),
        (b'{"type":"register","port":80,"base_path":5}', "got 5"),
        (b'{"type":"register","port":80,"base_path":"/a b"}', "'/a b'"),
        (b'{"type":"register","port":80,"base_path":"/a\\tb"}', "whitespace"),
        (b'{"type":"register","port":80,"base_path":"/a\\u0001"}', "control"),
        (b'{"type":"register","port":80,"base_path":"/a/../b"}', "'..'"),
        (b'{"type":"register","port":80,"base_path":"/.."}', "'..'"),
        (b'{"type":"register","port":80,"base_path":"/a?x=1"}', "'?' or '#'"),
        (b'{"type":"register","port":80,"base_path":"/a#x"}', "'?' or '#'"),
        (b'{"type":"register","port":80,"base_path":"/a//b"}', "empty"),
        (b'{"type":"register","port":80,"base_path":"/\\u00e9"}', "not allowed"),
        (b'{"type":"register","port":80,"base_path":"/a%zz"}', "not allowed"),
        (b'{"type":"register","port":80,"base_path":"/a\\"b"}', "not allowed"),
    ],
)
def test_invalid_registration_is_refused_naming_the_value(line: bytes, fragment: str) -> None:
    with pytest.raises(RegistrationError) as refused:
        parse_register_request(line)
    assert fragment in str(refused.value)


def test_overlong_base_path_is_refused() -> None:
    with pytest.raises(RegistrationError, match="limit is 1024"):
        normalize_base_path("/" + "a" * 2000)


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("/", "/"),
        ("/app", "/app"),
        ("/app/", "/app"),
        ("/a/b-c_d.e~f", "/a/b-c_d.e~f"),
        ("/%41pp", "/%41pp"),
    ],
)
def test_base_path_is_normalised_without_trailing_slash(given: str, stored: str) -> None:
    assert normalize_base_path(given) == stored
