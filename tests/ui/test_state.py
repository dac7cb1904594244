"""The page's actions refuse a bad value naming it, before any session is asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbridge.exceptions import SandbridgeError
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
