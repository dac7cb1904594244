"""The client's side of relay.sock (``protocol/sandbox_requests.py``): the requests are
the ones the host parses, an answer is read to its line or the limit, and anything but
a JSON object is refused naming what came; the module stays light enough for the
sandbox entry."""

from __future__ import annotations

import subprocess

import pytest

from sandbridge.protocol.auto_registration import parse_unregister_request
from sandbridge.protocol.registration import RegisterRequest, parse_register_request
from sandbridge.protocol.sandbox_requests import (
    MAX_ANSWER_BYTES,
    answer_complete,
    decode_answer,
    encode_auto_register_request,
    encode_register_request,
    encode_unregister_request,
)
from tests.conftest import PYTHON


def test_each_request_is_one_the_host_parses() -> None:
    assert parse_register_request(encode_register_request(4173, "/app")) == RegisterRequest(
        4173, "/app"
    )
    auto = parse_register_request(encode_auto_register_request(5173, "node"))
    assert (auto.port, auto.process, auto.auto) == (5173, "node", True)
    unregister = parse_unregister_request(encode_unregister_request(43125))
    assert unregister is not None and unregister.host_port == 43125


@pytest.mark.parametrize(
    ("answer", "complete"),
    [
        (b"", False),
        (b'{"ok":true', False),
        (b'{"ok":true}\n', True),
        (b"x" * MAX_ANSWER_BYTES, True),  # no newline, but all a client reads
    ],
)
def test_an_answer_is_complete_at_its_newline_or_the_limit(answer: bytes, complete: bool) -> None:
    assert answer_complete(answer) is complete


def test_an_answer_is_decoded_to_its_object() -> None:
    assert decode_answer(b'{"ok":true,"host_port":43125}\n') == {"ok": True, "host_port": 43125}


@pytest.mark.parametrize("answer", [b"[1]\n", b"42\n", b'"ok"\n'])
def test_an_answer_that_is_no_object_is_refused_naming_it(answer: bytes) -> None:
    with pytest.raises(ValueError, match="relay answered"):
        decode_answer(answer)


@pytest.mark.parametrize("answer", [b"", b"garbage\n", b"[" * 100 + b"\n"])
def test_an_answer_that_is_no_json_is_refused(answer: bytes) -> None:
    with pytest.raises(ValueError):
        decode_answer(answer)


def test_the_entrys_publishing_imports_neither_asyncio_nor_dataclasses_nor_logging() -> None:
    """What the sandbox entry imports to publish (issue 15's memory bound)."""
    code = (
        "import sys\n"
        "import sandbridge.sandbox.entry, sandbridge.relay.inside.publish\n"
        "import sandbridge.relay.inside.auto_publish\n"
        "print(sorted({'asyncio', 'dataclasses', 'logging', 'ssl'} & set(sys.modules)))\n"
    )
    result = subprocess.run(
        [PYTHON, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
