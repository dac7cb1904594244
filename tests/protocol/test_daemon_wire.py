"""The daemon socket's messages: decoded whole or refused with a reason."""

from __future__ import annotations

import os

import pytest

from sandbridge.exceptions import DaemonError
from sandbridge.protocol.daemon_wire import (
    MAX_MESSAGE_BYTES,
    Event,
    asks_for_dashboard,
    carries_namespace,
    dashboard_message,
    decode_event,
    decode_request,
    decode_run_request,
    encode,
    event,
    request,
    run_request,
)


def test_request_comes_back_as_sent() -> None:
    assert decode_request(request({"a": 1}, "/run/x", "/run/y")) == ({"a": 1}, "/run/x", "/run/y")


def test_event_comes_back_as_sent() -> None:
    assert decode_event(event(Event.APP, {"port": 1})) == (Event.APP, {"port": 1})


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b'{"ready": 1, "app": 2}', "a daemon event has one key"),
        (b'{"hello": 1}', "unknown daemon event 'hello'"),
        (b"[]", "a daemon message must be a JSON object"),
        (b"{", "message is not valid JSON"),
        (b"[" * 200 + b"]" * 200, "message is not accepted"),
    ],
)
def test_malformed_event_is_refused(data: bytes, error: str) -> None:
    with pytest.raises(DaemonError, match=error):
        decode_event(data)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b'{"version": 2}', "protocol version 2 is not 1"),
        (b'{"version": 1, "serve": []}', "options under 'serve'"),
        (b'{"version": 1, "serve": {}, "runtime_dir": 1}', "'runtime_dir' and 'session_dir'"),
    ],
)
def test_malformed_request_is_refused(data: bytes, error: str) -> None:
    with pytest.raises(DaemonError, match=error):
        decode_request(data)


def test_message_over_the_limit_is_refused_before_it_is_sent() -> None:
    with pytest.raises(DaemonError, match=f"over {MAX_MESSAGE_BYTES}"):
        encode({"say": "x" * MAX_MESSAGE_BYTES})


def test_a_dashboard_request_is_told_from_a_session_request() -> None:
    assert asks_for_dashboard(encode(dashboard_message()))
    assert not asks_for_dashboard(request({"a": 1}, "/run/x", "/run/y"))
    assert decode_event(event(Event.DASHBOARD, "http://127.0.0.1:1/?token=t")) == (
        Event.DASHBOARD,
        "http://127.0.0.1:1/?token=t",
    )


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"version": 1, "dashboard": "url", "serve": {}}, "a dashboard request is"),
        ({"version": 1, "dashboard": "token"}, "a dashboard request is"),
        ({"version": 2, "dashboard": "url"}, "protocol version 2 is not 1"),
    ],
)
def test_a_malformed_dashboard_request_is_refused(message: dict[str, object], error: str) -> None:
    with pytest.raises(DaemonError, match=error):
        asks_for_dashboard(encode(message))


def test_a_run_request_with_a_real_clients_undecodable_bytes_is_taken() -> None:
    # A real argv or environment holds bytes that are not UTF-8: Python reads them as
    # U+DC80 to U+DCFF, which encode back. Only JSON's other lone surrogates are refused.
    run = {
        "argv": ["run", "--", "cat", os.fsdecode(b"caf\xe9")],
        "cwd": os.fsdecode(b"/tmp/\xff"),
        "cwd_id": [1, 2],
        "env": {"LANG_X": os.fsdecode(b"\x80\xfe")},
        "umask": 0o22,
        "python": "/usr/bin/python3 in /usr",
        "package": "sandbridge 1 in /x",
    }
    assert decode_run_request(run_request(run)) == run


def test_a_request_says_whether_its_last_descriptor_is_the_namespace() -> None:
    with_namespace = request({"a": 1}, "/run/x", "/run/y", namespace=True)
    assert carries_namespace(with_namespace)
    assert decode_request(with_namespace) == ({"a": 1}, "/run/x", "/run/y")
    assert not carries_namespace(request({"a": 1}, "/run/x", "/run/y"))


@pytest.mark.parametrize("value", ["1", '"yes"', "null", "[]"])
def test_a_namespace_flag_that_is_not_true_is_refused(value: str) -> None:
    data = b'{"version": 1, "serve": {}, "namespace": ' + value.encode() + b"}"
    with pytest.raises(DaemonError, match="'namespace' is true or absent"):
        carries_namespace(data)
