"""Forwarding v1 messages exactly as the contract writes them."""

from __future__ import annotations

import base64
import json

import pytest

from sandbridge.exceptions import WireError
from sandbridge.protocol import v1

CONTRACT_REQUEST = (
    b'{"type":"http_request","port":4173,"base_path":"/app","method":"GET",'
    b'"path":"/styles.css?theme=dark","headers":[["accept","text/css"]],"body_base64":null}'
)
CONTRACT_RESPONSE = (
    b'{"ok":true,"status":200,"reason":"OK","headers":[["content-type",'
    b'"text/css; charset=utf-8"]],"body_base64":"Ym9keSB7fQ=="}'
)


def test_contract_request_decodes() -> None:
    request = v1.decode_request(CONTRACT_REQUEST)
    assert request == v1.V1Request(
        4173, "/app", "GET", "/styles.css?theme=dark", [(b"accept", b"text/css")], b""
    )


def test_request_encodes_to_the_contract_fields() -> None:
    line = v1.encode_request(v1.decode_request(CONTRACT_REQUEST))
    assert json.loads(line) == json.loads(CONTRACT_REQUEST)


def test_contract_response_decodes() -> None:
    response = v1.decode_response(CONTRACT_RESPONSE)
    assert response.status == 200
    assert response.body == b"body {}"


def test_response_encodes_to_the_contract_fields() -> None:
    line = v1.encode_response(v1.decode_response(CONTRACT_RESPONSE))
    assert json.loads(line) == json.loads(CONTRACT_RESPONSE)


def test_error_answer_raises_with_its_text() -> None:
    with pytest.raises(WireError, match="nope"):
        v1.decode_response(b'{"ok":false,"error":"nope"}')


@pytest.mark.parametrize(
    "answer",
    [
        {"ok": True, "status": 99, "reason": "", "headers": []},
        {"ok": True, "status": 101, "reason": "", "headers": []},
        {"ok": True, "status": "200", "reason": "", "headers": []},
        {"ok": True, "status": 200, "reason": "a\r\nb", "headers": []},
        {"ok": True, "status": 200, "reason": "", "headers": [["x y", "1"]]},
        {"ok": True, "status": 200, "reason": "", "headers": [["x", "a\r\nSet-Cookie: b"]]},
        {"ok": True, "status": 200, "reason": "", "headers": [["x", "a\u0000"]]},
        {"ok": True, "status": 200, "reason": "", "headers": "x"},
        {"ok": True, "status": 200, "reason": "", "headers": [["x"]]},
        {"ok": True, "status": 200, "reason": "", "headers": [], "body_base64": "!!"},
        {"ok": "yes"},
    ],
)
def test_hostile_answers_are_refused(answer: dict[str, object]) -> None:
    with pytest.raises(WireError):
        v1.decode_response(json.dumps(answer).encode())


def test_body_round_trips_through_base64() -> None:
    body = bytes(range(256))
    line = v1.encode_request(v1.V1Request(80, "/", "POST", "/u", [], body))
    assert json.loads(line)["body_base64"] == base64.b64encode(body).decode()
    assert v1.decode_request(line.rstrip(b"\n")).body == body
