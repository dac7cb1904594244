"""Naming a session and a request, here or on a connected far machine (terminals/control.py)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.exceptions import SandbridgeError
from sandbridge.places.registry import SessionEntry
from sandbridge.terminals import control
from sandbridge.terminals.control import (
    Place,
    call,
    first_line,
    parse_place,
    parse_request_id,
)
from tests.conftest import silent_unix_server


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


@pytest.fixture
def silent_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[socket.socket]]:
    """Session ``web`` whose control socket takes connections and never answers (its
    host stopped with Ctrl-Z, say); the connections it took."""
    for name in ("XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
        (tmp_path / name.lower()).mkdir(mode=0o700)
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setattr(control, "ANSWER_TIMEOUT", 0.3)
    entry = SessionEntry.create("web", tmp_path)
    server, held = silent_unix_server(entry.control_socket)
    yield held
    server.close()
    for sock in held:
        sock.close()
    entry.remove()


def test_a_session_that_never_answers_is_said_after_the_answer_timeout(
    silent_session: list[socket.socket],
) -> None:
    with pytest.raises(SandbridgeError, match=r"^session web did not answer 'list' within 0.3 s$"):
        call("web", {"op": "list"})


def test_waiting_for_the_owner_is_not_cut_short(silent_session: list[socket.socket]) -> None:
    answers: list[object] = []
    waiting = threading.Thread(
        target=lambda: answers.append(call("web", {"op": "await", "id": "web:0123abcd"})),
        daemon=True,
    )
    waiting.start()
    waiting.join(1.0)  # over three answer timeouts: still waiting, as it should
    assert waiting.is_alive() and answers == []
    silent_session[0].sendall(b'{"ok": true, "state": "approved"}\n')
    waiting.join(10)
    assert answers == [{"ok": True, "state": "approved"}]
