"""Auto-publish's fields of ``register`` and the ``unregister`` message (docs/contract.md)."""

from __future__ import annotations

import json

import pytest

from sandbridge.exceptions import RegistrationError
from sandbridge.protocol.auto_registration import (
    PublishedBy,
    UnregisterRequest,
    encode_unregister_ok,
    parse_published_by,
    parse_unregister_request,
)
from sandbridge.protocol.registration import encode_register_ok, parse_register_request
from sandbridge.protocol.sandbox_requests import (
    MAX_PROCESS_NAME,
    encode_auto_register_request,
    encode_unregister_request,
    process_name,
)


def test_contract_request_has_neither_field() -> None:
    request = parse_register_request(b'{"type":"register","port":4173,"base_path":"/"}')
    assert (request.process, request.auto) == (None, False)


def test_auto_request_carries_the_process_and_auto() -> None:
    request = parse_register_request(encode_auto_register_request(5173, "node"))
    assert (request.port, request.base_path, request.process, request.auto) == (
        5173,
        "/",
        "node",
        True,
    )


def test_auto_request_is_the_contract_request_plus_two_fields() -> None:
    sent = json.loads(encode_auto_register_request(5173, "node"))
    assert sent == {
        "type": "register",
        "port": 5173,
        "base_path": "/",
        "process": "node",
        "auto": True,
    }


def test_answer_bytes_do_not_change_with_the_new_fields() -> None:
    # The answer is built from the app alone: the contract's four fields, in its order.
    assert encode_register_ok(43125, "/", "http://a.localhost:43125/") == (
        b'{"ok":true,"host_port":43125,"base_path":"/","url":"http://a.localhost:43125/"}\n'
    )


@pytest.mark.parametrize(
    ("message", "fragment"),
    [
        ({"process": ""}, "process must be 1..64 printable ASCII characters, got ''"),
        ({"process": 7}, "got 7"),
        ({"process": None}, None),
        ({"process": "x" * (MAX_PROCESS_NAME + 1)}, "process must be 1..64"),
        ({"process": "evil\x1b[2J"}, "printable ASCII"),
        ({"process": "caf\u00e9"}, "printable ASCII"),
        ({"process": "a\nb"}, "printable ASCII"),
        ({"auto": 1}, "auto must be true or false, got 1"),
        ({"auto": "true"}, "auto must be true or false, got 'true'"),
        ({"auto": None}, "auto must be true or false, got None"),
    ],
)
def test_bad_optional_fields_are_refused_naming_the_value(
    message: dict[str, object], fragment: str | None
) -> None:
    if fragment is None:
        assert parse_published_by(message) == PublishedBy()
        return
    with pytest.raises(RegistrationError, match=fragment.replace("[", r"\[")):
        parse_published_by(message)


def test_a_refused_long_value_is_shown_cut() -> None:
    with pytest.raises(RegistrationError) as caught:
        parse_published_by({"process": "\x01" * 4000})
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("node\n", "node"),
        ("", "unknown"),
        ("  \n", "unknown"),
        ("tab\there", "tab?here"),
        ("\x1b[31mred", "?[31mred"),
        ("ünï", "?n?"),
        ("y" * 100, "y" * MAX_PROCESS_NAME),
    ],
)
def test_process_names_from_proc_are_made_acceptable(raw: str, name: str) -> None:
    assert process_name(raw) == name
    assert parse_published_by({"process": process_name(raw)}).process == name


def test_unregister_round_trip() -> None:
    assert parse_unregister_request(encode_unregister_request(43125)) == UnregisterRequest(43125)
    assert json.loads(encode_unregister_ok(43125)) == {"ok": True, "host_port": 43125}


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"register","port":80}',
        b"not json",
        b"[1,2]",
        b'{"type":"unregisterX","host_port":80}',
        b'{"port":80}',
    ],
)
def test_other_lines_are_left_to_the_registration_parser(line: bytes) -> None:
    assert parse_unregister_request(line) is None


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        (b'{"type":"unregister"}', "host_port is missing"),
        (b'{"type":"unregister","host_port":0}', "host_port must be an integer 1..65535, got 0"),
        (b'{"type":"unregister","host_port":65536}', "got 65536"),
        (b'{"type":"unregister","host_port":"80"}', "got '80'"),
        (b'{"type":"unregister","host_port":true}', "got True"),
        (b'{"type":"unregister","host_port":80.0}', "got 80.0"),
    ],
)
def test_bad_unregister_requests_are_refused(line: bytes, fragment: str) -> None:
    with pytest.raises(RegistrationError, match=fragment):
        parse_unregister_request(line)
