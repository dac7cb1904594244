"""The page's actions refuse a bad value naming it, before any session is asked."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from sandbridge.exceptions import SandbridgeError
from sandbridge.places.registry import SessionEntry
from sandbridge.places.remotes import RemoteAppRecord, RemoteEntry, list_remotes
from sandbridge.protocol.far_sessions import FarRequest, FarSession
from sandbridge.terminals.control import short_path
from sandbridge.ui.state import MAX_TTL, act, snapshot


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"action": "launch"}, "unknown action 'launch'"),
        ({}, "unknown action 'None'"),
        ({"action": "stop"}, "session must be a non-empty string, got None"),
        ({"action": "stop", "session": "../x"}, "session '../x': use 1-40 characters"),
        ({"action": "app_close", "session": "web", "host_port": "80"}, "got '80'"),
        ({"action": "app_close", "session": "web", "host_port": True}, "got True"),
        ({"action": "terminal_approve", "id": "web:00000000", "ttl": MAX_TTL + 1}, "ttl must be"),
        ({"action": "terminal_approve", "id": "web:00000000", "ttl": "600"}, "ttl must be"),
        ({"action": "terminal_approve", "id": "web:00000000", "ttl": True}, "ttl must be"),
        ({"action": "terminal_deny", "id": "web"}, "expected SESSION:XXXXXXXX"),
        ({"action": "egress_approve", "session": "web", "id": "x", "scope": "forever"},
         "scope must be once or session, got 'forever'"),
    ],
)  # fmt: skip
def test_a_bad_action_is_refused_naming_the_value(body: dict[str, object], says: str) -> None:
    with pytest.raises(SandbridgeError) as refused:
        act(body)
    assert says in str(refused.value)


def test_without_sessions_the_tables_are_empty_and_no_key_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert snapshot() == {
        "sessions": [], "apps": [], "terminals": [], "egress": [], "egress_pending": [],
    }  # fmt: skip
    assert not (tmp_path / "config").exists(), "reading the page made an owner key"


def test_a_session_answering_out_of_shape_is_left_out_and_others_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    odd = SessionEntry.create("odd", tmp_path)
    plain = SessionEntry.create("plain", tmp_path)  # no control socket: listed, not controllable
    served = threading.Event()
    with short_path(odd.control_socket) as path:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
    server.listen()
    server.settimeout(0.05)  # the thread sees ``served`` between accepts

    def answer_out_of_shape() -> None:
        while not served.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                connection.recv(4096)
                connection.sendall(b'{"ok": true, "command": 5, "requests": 7}\n')

    thread = threading.Thread(target=answer_out_of_shape)
    thread.start()
    try:
        tables = snapshot()
    finally:
        served.set()
        thread.join(10)
        server.close()
        odd.remove()
        plain.remove()
    assert [s["id"] for s in tables["sessions"]] == ["plain"]
    assert tables["sessions"][0]["controllable"] is False


def test_far_apps_are_listed_with_their_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    entry = RemoteEntry.create("box", "ssh box sandbridge serve-stdio")
    try:
        entry.update(True, [RemoteAppRecord("web", 5173, "/", "http://a.localhost:4000/", 4000)])
        assert snapshot()["apps"] == [
            {
                "session": "box:web", "port": 5173, "process": None,
                "url": "http://a.localhost:4000/", "host_port": 4000, "private": False,
                "machine": "box",
            }
        ]  # fmt: skip
    finally:
        entry.remove()


def test_a_private_far_app_is_listed_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    entry = RemoteEntry.create("box", "ssh box sandbridge serve-stdio")
    try:
        entry.update(
            True, [RemoteAppRecord("web", 5173, "/", "http://a.localhost:4000/", 4000, True)]
        )
        [app] = snapshot()["apps"]
        assert app["private"] is True and app["url"] == "http://a.localhost:4000/"
    finally:
        entry.remove()


def _described(requests: tuple[FarRequest, ...] = ()) -> FarSession:
    return FarSession("web", "/w", "bash", 1.7e9, "none", requests)


def test_far_sessions_and_their_requests_are_listed_under_the_laptops_name_for_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    request = FarRequest("web:0123abcd", "pending", "ab" * 32, "look", 1.7e9, 600.0, None)
    entry = RemoteEntry.create("box", "ssh box sandbridge serve-stdio")
    try:
        entry.update(True, [], (_described((request,)),))
        tables = snapshot()
        [session] = tables["sessions"]
        assert session["id"] == "box:web" and session["machine"] == "box"
        assert session["controllable"] is False and "stop it on box" in session["stop_note"]
        [terminal] = tables["terminals"]
        assert terminal["id"] == "box:web:0123abcd" and terminal["session"] == "box:web"
        assert terminal["machine"] == "box" and terminal["name"] is None
        # While the link is down, what the far side said no longer holds: nothing shown.
        entry.update(False, [], (_described((request,)),))
        assert snapshot()["sessions"] == snapshot()["terminals"] == []
    finally:
        entry.remove()


def test_a_machine_record_with_a_session_out_of_bounds_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    entry = RemoteEntry.create("box", "ssh box sandbridge serve-stdio")
    try:
        record = entry.path / "machine.json"
        entry.update(True, [], (_described(),))
        written = json.loads(record.read_text())
        written["sessions"][0]["started"] = float("nan")
        record.write_text(json.dumps(written))
        assert [r.machine for r in list_remotes()] == []
        assert snapshot()["sessions"] == []
    finally:
        entry.remove()


def test_a_far_deny_goes_to_the_connect_serving_its_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with pytest.raises(SandbridgeError, match="no sandbridge connect serves a machine named 'box'"):
        act({"action": "terminal_deny", "id": "box:web:0123abcd"})
