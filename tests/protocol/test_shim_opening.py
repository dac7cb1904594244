"""The shim's decision on a connection's first line, and its answers (both of the shim's
servers decide with it)."""

from __future__ import annotations

import json

import pytest

from sandbridge.protocol import stream
from sandbridge.protocol.app_address import AppAttempts
from sandbridge.protocol.shim_opening import (
    Exchange,
    HandOff,
    Refuse,
    Relay,
    connect_failed,
    decide,
    refusal,
)

HANDOFF = stream.encode_open(4173, handoff=True).rstrip(b"\n")
PLAIN = stream.encode_open(4173).rstrip(b"\n")
V1 = b'{"type":"http_request","port":4173,"method":"GET","path":"/"}'


@pytest.mark.parametrize(
    ("line", "rest", "ended", "decision"),
    [
        (HANDOFF, b"", False, HandOff(4173)),
        (PLAIN, b"", False, Relay(4173)),
        (HANDOFF, b"GET", False, Relay(4173)),  # bytes after it: they must be relayed
        (HANDOFF, b"", True, Relay(4173)),  # the host closed its side: nothing to hand over
        (V1, b"", False, Exchange(json.loads(V1))),
    ],
)
def test_a_well_formed_first_line_is_served_as_it_asks(
    line: bytes, rest: bytes, ended: bool, decision: object
) -> None:
    assert decide(line, rest, ended) == decision


@pytest.mark.parametrize(
    ("line", "answer"),
    [
        (b"not json", {"ok": False, "error": "message is not valid JSON: "}),
        (b"[1]", {"ok": False, "error": "message must be a JSON object, got list"}),
        (b'{"port":NaN}', {"ok": False, "error": "message is not valid JSON: NaN "}),
        (b"{}", {"ok": False, "error": "type must be 'http_request', got None"}),
        (b'{"type":"register"}', {"ok": False, "error": "type must be 'http_request', got"}),
        (
            b'{"type":"http_stream","version":1,"port":0,"handoff":1}',
            {"ok": False, "stream": 1, "error": "port must be an integer 1..65535, got 0"},
        ),
        (
            b'{"type":"http_stream","version":2,"port":80}',
            {"ok": False, "stream": 1, "error": "unsupported stream version 2"},
        ),
        (
            b'{"type":"http_stream","version":1,"port":true}',
            {"ok": False, "stream": 1, "error": "port must be an integer 1..65535, got True"},
        ),
    ],
)
def test_a_bad_first_line_is_refused_naming_what_is_wrong(
    line: bytes, answer: dict[str, object]
) -> None:
    decision = decide(line, b"", False)
    assert isinstance(decision, Refuse)
    assert decision.answer.endswith(b"\n")
    got = json.loads(decision.answer)
    assert {key: got[key] for key in answer if key != "error"} == {
        key: value for key, value in answer.items() if key != "error"
    }
    assert str(got["error"]).startswith(str(answer["error"]))


def test_a_refusal_is_the_contracts_failure_answer() -> None:
    assert refusal("timed out") == Refuse(b'{"ok":false,"error":"timed out"}\n')


def test_a_failed_connect_names_each_address_tried_and_why() -> None:
    attempts = AppAttempts(4173)
    while attempts.failed(ConnectionRefusedError(111, "Connection refused")):
        pass
    answer = json.loads(connect_failed(attempts.error))
    assert answer == {
        "ok": False,
        "stream": 1,
        "error": "connect to 127.0.0.1:4173 failed: [Errno 111] Connection refused; "
        "connect to [::1]:4173 failed: [Errno 111] Connection refused",
    }


def test_a_connect_that_timed_out_says_so() -> None:
    attempts = AppAttempts(4173)
    assert not attempts.failed(TimeoutError())
    answer = json.loads(connect_failed(attempts.error))
    assert answer["error"] == "connect to 127.0.0.1:4173 failed: timed out"
