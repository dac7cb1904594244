"""Stream mode's opening and answer."""

from __future__ import annotations

import json

import pytest

from sandbridge.exceptions import NotStreamCapable, WireError
from sandbridge.protocol import stream


def test_opening_names_type_version_and_port() -> None:
    assert json.loads(stream.encode_open(4173)) == {
        "type": "http_stream",
        "version": 1,
        "port": 4173,
    }


def test_opening_round_trips() -> None:
    assert stream.decode_open(json.loads(stream.encode_open(8080))) == stream.StreamOpen(8080)


def test_opening_with_a_bad_port_is_refused() -> None:
    with pytest.raises(WireError, match="got 0"):
        stream.decode_open({"type": "http_stream", "version": 1, "port": 0})


def test_ack_success_and_failure() -> None:
    assert stream.decode_ack(stream.encode_ack()).ok
    failed = stream.decode_ack(stream.encode_ack("refused"))
    assert (failed.ok, failed.error) == (False, "refused")


def test_answer_without_stream_field_means_a_v1_only_peer() -> None:
    with pytest.raises(NotStreamCapable):
        stream.decode_ack(b'{"ok":false,"error":"unknown type"}')


def test_opening_offers_a_handoff_only_when_asked() -> None:
    assert json.loads(stream.encode_open(4173, handoff=True))["handoff"] == 1
    offered = stream.decode_open(json.loads(stream.encode_open(4173, handoff=True)))
    assert offered == stream.StreamOpen(4173, handoff=True)


def test_opening_of_an_older_host_has_no_handoff() -> None:
    assert not stream.decode_open({"type": "http_stream", "version": 1, "port": 80}).handoff


def test_unknown_handoff_version_is_not_a_handoff() -> None:
    message = {"type": "http_stream", "version": 1, "port": 80, "handoff": 2}
    assert not stream.decode_open(message).handoff


def test_ack_says_whether_the_socket_was_handed_over() -> None:
    assert stream.decode_ack(stream.encode_ack(handoff=True)).handoff
    assert not stream.decode_ack(stream.encode_ack()).handoff
    assert not stream.decode_ack(stream.encode_ack("refused", handoff=True)).handoff
