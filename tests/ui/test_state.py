"""The page's actions refuse a bad value naming it, before any session is asked."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from sandbridge.clipboard.read_log import TransferLog
from sandbridge.containers.decision_log import DecisionLog
from sandbridge.exceptions import SandbridgeError
from sandbridge.places.registry import SessionEntry
from sandbridge.places.remotes import (
    RemoteAppRecord,
    RemoteEntry,
    list_remotes,
    remote_control_socket,
)
from sandbridge.places.socket_path import short_path
from sandbridge.protocol.far_sessions import FarRequest, FarSession
from sandbridge.ssh_agent.signature_log import SignatureLog
from sandbridge.terminals import control
from sandbridge.ui.state import MAX_TTL, POLL_TIMEOUT, Answers, act, snapshot
from tests.conftest import silent_unix_server


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
        ({"action": "egress_approve", "session": "web", "id": "x", "scope": "once",
          "private": "true"}, "private must be true or false, got 'true'"),
        ({"action": "egress_approve", "session": "web", "id": "x", "scope": "once",
          "private": 1}, "private must be true or false, got 1"),
        ({"action": "egress_approve", "session": "web", "id": "x", "scope": "session",
          "private": None}, "private must be true or false, got None"),
    ],
)  # fmt: skip
def test_a_bad_action_is_refused_naming_the_value(body: dict[str, object], says: str) -> None:
    with pytest.raises(SandbridgeError) as refused:
        act(body)
    assert says in str(refused.value)


def answering_control_socket(path: Path, answer: dict[str, object]) -> list[dict[str, object]]:
    """A session's control socket at ``path`` that answers one request with ``answer``:
    the requests it was sent, once it has answered."""
    server = socket.socket(socket.AF_UNIX)
    with short_path(path) as short:
        server.bind(str(short))
    server.listen(1)
    received: list[dict[str, object]] = []

    def serve() -> None:
        with server, server.accept()[0] as connection, connection.makefile("rwb") as file:
            received.append(json.loads(file.readline()))
            file.write(json.dumps(answer).encode() + b"\n")

    threading.Thread(target=serve, daemon=True).start()
    return received


@pytest.mark.parametrize(
    ("sent", "private"),
    [({"private": True}, True), ({"private": False}, False), ({}, False)],
    ids=["private", "not-private", "not-said"],
)
def test_an_egress_approval_sends_the_session_private_only_as_the_page_said_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sent: dict[str, object], private: bool
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    entry = SessionEntry.create("web", tmp_path)
    granted = "mirror.test:80 private" if private else "mirror.test:80"
    answer = {"ok": True, "id": "web:0123abcd", "state": "approved", "scope": "session",
              "destination": granted, "saved": None}  # fmt: skip
    received = answering_control_socket(entry.control_socket, answer)
    try:
        body = {"action": "egress_approve", "session": "web", "id": "web:0123abcd"}
        result = act({**body, "scope": "session", "save": False, **sent})
    finally:
        entry.remove()
    assert received == [
        {"op": "egress_approve", "id": "web:0123abcd", "scope": "session", "save": False,
         "private": private}
    ]  # fmt: skip
    assert result["destination"] == granted


def test_without_sessions_the_tables_are_empty_and_no_key_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert snapshot() == {
        "sessions": [], "apps": [], "terminals": [], "egress": [], "egress_pending": [],
        "logins": [], "questions": [],
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


def _hostile_far_control(path: Path, show: dict[str, object], asked: list[str]) -> threading.Thread:
    """A ``connect`` control socket at ``path`` as a hostile far machine answers through
    it: ``show`` answered with ``show``, ``approve`` recorded in ``asked`` and accepted."""
    server = socket.socket(socket.AF_UNIX)
    with short_path(path) as short:
        server.bind(str(short))
    server.listen()

    def serve() -> None:
        with server:
            for _ in range(2):
                connection, _ = server.accept()
                with connection, connection.makefile("rb") as lines:
                    lines.readline()  # {"session": ...}: the far session's name
                    op = json.loads(lines.readline())["op"]
                    asked.append(op)
                    answer = show if op == "show" else {"ok": True, "state": "approved"}
                    connection.sendall(json.dumps(answer).encode() + b"\n")
                if op == "show":
                    return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(
    ("changed", "says"),
    [
        ({"requester": "cd" * 32}, "requester cdcdcdcdcdcdcdcd"),
        ({"duration": 86400.0}, "asks 86400.0 s, not 600 s as shown"),
    ],
)
def test_a_far_approval_signs_nothing_but_the_request_the_page_showed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changed: dict[str, object], says: str
) -> None:
    """The page lists a far request as the far machine described it (requester, duration
    asked); the approval is signed from the far side's ``show`` at the click. A hostile
    far machine answered ``show`` with another requester (its own key, or a request of
    another machine with the same session name) or a longer duration: the owner signed
    what the page never showed. Now the page sends what it showed, and anything else in
    ``show`` is refused, naming both, before anything is signed or sent."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    entry = RemoteEntry.create("box", "ssh box sandbridge serve-stdio")
    shown = {"requester": "ab" * 32, "duration": 600.0}
    lie = {**shown, **changed}
    answer = {
        "ok": True, "id": "web:0123abcd", "state": "pending", "duration": lie["duration"],
        "session": "web", "instance": "00" * 16,
        "request": {"requester": lie["requester"], "reason": "look", "created": 1.7e9,
                    "nonce": "11" * 16},
    }  # fmt: skip
    asked: list[str] = []
    thread = _hostile_far_control(remote_control_socket("box"), answer, asked)
    try:
        with pytest.raises(SandbridgeError, match=says):
            act({"action": "terminal_approve", "id": "box:web:0123abcd", "ttl": None, **shown})
        thread.join(10)
        assert asked == ["show"]
    finally:
        entry.remove()


@pytest.mark.parametrize(
    "answer",
    [
        {"ok": True, "request": 5},
        {"ok": True, "duration": "long", "request": {"requester": "ab" * 32}},
        {"ok": True, "instance": "i", "request": {"requester": "ab" * 32, "created": "x"}},
    ],
    ids=["request-not-an-object", "duration-not-a-number", "fields-missing"],
)
def test_a_far_show_answer_out_of_shape_is_refused_naming_the_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: dict[str, object]
) -> None:
    """A hostile far machine's ``show`` answer is its word: out of shape, the page's
    approve is a refusal naming the request (an HTTP 400), not a traceback."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    entry = RemoteEntry.create("box", "ssh box sandbridge serve-stdio")
    asked: list[str] = []
    thread = _hostile_far_control(remote_control_socket("box"), answer, asked)
    try:
        says = r"^request box:web:0123abcd: its session.*; nothing was signed"
        with pytest.raises(SandbridgeError, match=says):
            act(
                {"action": "terminal_approve", "id": "box:web:0123abcd", "ttl": None,
                 "requester": "ab" * 32, "duration": None}
            )  # fmt: skip
        thread.join(10)
        assert asked == ["show"]
    finally:
        entry.remove()


def test_an_approval_from_the_page_must_say_what_it_showed() -> None:
    with pytest.raises(SandbridgeError, match="requester must be a non-empty string, got None"):
        act({"action": "terminal_approve", "id": "web:00000000", "ttl": 60})


@pytest.mark.parametrize(
    "body",
    [
        {"action": "terminal_deny", "id": "box:web:0123abcd"},
        {"action": "terminal_revoke", "id": "box:web:0123abcd"},
        {"action": "terminal_approve", "id": "box:web:0123abcd", "ttl": None,
         "requester": "ab" * 32, "duration": None},
    ],
    ids=["deny", "revoke", "approve"],
)  # fmt: skip
def test_a_far_machine_that_never_answers_does_not_hold_the_pages_action(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: dict[str, object]
) -> None:
    """Each of the page's actions runs on one of the host's few worker threads, which the
    page's reads of the tables share; a far machine that took the control stream and never
    answered held its thread for good, click after click, until the page froze."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setattr(control, "ANSWER_TIMEOUT", 0.5, raising=False)
    entry = RemoteEntry.create("box", "ssh box sandbridge serve-stdio")
    server, held = silent_unix_server(remote_control_socket("box"))
    outcome: list[Exception | None] = []

    def click() -> None:
        try:
            act(body)
        except Exception as exc:  # what the page would be told
            outcome.append(exc)
        else:
            outcome.append(None)

    clicked = threading.Thread(target=click, daemon=True)
    try:
        clicked.start()
        clicked.join(10)
        assert not clicked.is_alive(), "the action still waits for a far machine that is silent"
        [refusal] = outcome
        assert isinstance(refusal, SandbridgeError)
        assert "box:web did not answer" in str(refusal) and "0.5 s" in str(refusal)
    finally:
        server.close()
        for sock in held:
            sock.close()
        entry.remove()


def test_a_session_that_never_answers_holds_up_the_tables_once_and_briefly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A standalone session whose host is stopped (Ctrl-Z) still accepts on its control
    socket and never answers: the feed's read of every session's tables waited for it,
    for good, then four answer timeouts each read. Now it waits one poll timeout."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    stopped = SessionEntry.create("stopped", tmp_path)
    plain = SessionEntry.create("plain", tmp_path)
    server = socket.socket(socket.AF_UNIX)
    with short_path(stopped.control_socket) as path:
        server.bind(str(path))
    server.listen(16)  # the kernel takes the connections; nobody ever accepts them
    read: list[dict[str, list[dict[str, object]]]] = []
    reading = threading.Thread(target=lambda: read.append(snapshot()), daemon=True)
    try:
        reading.start()
        reading.join(POLL_TIMEOUT + 3)
        assert not reading.is_alive(), "the tables still wait for the silent session"
    finally:
        server.close()
        reading.join(60)
        stopped.remove()
        plain.remove()
    [tables] = read
    assert sorted(str(s["id"]) for s in tables["sessions"]) == ["plain", "stopped"]
    assert [s["controllable"] for s in tables["sessions"]] == [False, False]


def test_an_egress_reason_reaches_the_page_with_its_hidden_characters_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reason is the sandbox's words: the owner's terminal and `egress pending` show
    its line breaks, bidi overrides and zero-width characters escaped; the page got them
    raw (a bidi override turned the rest of the cell around)."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    entry = SessionEntry.create("web", tmp_path)
    reason = "npm\u202e needs\u200b it\nreally \\x41"
    ask = {"id": "web:0123abcd", "destination": "registry.example.com:443", "reason": reason}
    try:
        tables = snapshot({"web": Answers({"command": ["sh"], "network": "allow"}, pending=[ask])})
    finally:
        entry.remove()
    [row] = tables["egress_pending"]
    assert row["reason"] == "npm\\u202e needs\\u200b it\\x0areally \\\\x41"
    assert row["reason"].isprintable()


def test_a_session_s_ssh_agent_signatures_are_counted_in_its_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    signing = SessionEntry.create("signing", tmp_path)
    plain = SessionEntry.create("plain", tmp_path)
    signatures = SignatureLog(signing.path)
    for signed in (True, True, False):
        signatures.record(
            signed=signed, key="SHA256:k", comment="c", offered=True, signed_for="x", reason=""
        )
    try:
        rows = {s["id"]: s["ssh_agent"] for s in snapshot()["sessions"]}
    finally:
        signing.remove()
        plain.remove()
    assert rows == {"signing": {"signed": 2, "refused": 1}, "plain": None}


def test_a_sessions_login_callbacks_are_listed_without_their_query(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    entry = SessionEntry.create("web", tmp_path)
    callback = {
        "host": "127.0.0.1", "port": 38119, "path": "/callback",
        "authorize_host": "auth.example.com", "state": "waiting",
    }  # fmt: skip
    info = {"command": ["claude"], "network": "allow", "oauth_callbacks": True}
    try:
        tables = snapshot({"web": Answers({**info, "callbacks": [callback]})})
    finally:
        entry.remove()
    assert tables["logins"] == [
        {
            "session": "web",
            "callback": "http://127.0.0.1:38119/callback",
            "authorize_host": "auth.example.com",
            "state": "waiting",
        }
    ]


def test_a_session_s_clipboard_transfers_are_counted_in_its_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    pasting = SessionEntry.create("pasting", tmp_path)
    plain = SessionEntry.create("plain", tmp_path)
    transfers = TransferLog(pasting.path)
    for op, allowed in (("read", True), ("read", True), ("read", False), ("write", False)):
        transfers.record(op=op, allowed=allowed, kind="text/plain", size=4, reason="")
    try:
        rows = {s["id"]: s["clipboard"] for s in snapshot()["sessions"]}
    finally:
        pasting.remove()
        plain.remove()
    assert rows == {"pasting": {"reads": 2, "writes": 0, "refused": 2}, "plain": None}


def test_a_session_s_container_requests_are_counted_in_its_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    running = SessionEntry.create("running", tmp_path)
    plain = SessionEntry.create("plain", tmp_path)
    decisions = DecisionLog(running.path)
    decisions.record(allowed=True, endpoint="container-create", method="POST", created=True)
    decisions.record(allowed=True, endpoint="container-start", method="POST")
    decisions.record(allowed=False, endpoint="container-create", method="POST",
                     field="HostConfig.Privileged", rule="no-privileged")  # fmt: skip
    try:
        rows = {s["id"]: s["containers"] for s in snapshot()["sessions"]}
    finally:
        running.remove()
        plain.remove()
    assert rows == {"running": {"allowed": 2, "refused": 1, "created": 1}, "plain": None}
