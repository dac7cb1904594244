"""The owner's approval, signed with the owner key, as the CLI and the dashboard send it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.exceptions import ControlError
from sandbridge.terminals.owner_approval import approve_request
from tests.terminals.harness import TerminalSession


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TerminalSession]:
    running = TerminalSession(tmp_path)
    for name in ("XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
        monkeypatch.setenv(name, running.env[name])
    yield running
    running.stop()


def test_an_approval_is_signed_and_admitted_for_its_ttl(session: TerminalSession) -> None:
    request_id = session.request()
    answer = approve_request(request_id, 90)
    assert answer["state"] == "approved"
    assert time.time() + 80 < float(answer["expires"]) <= time.time() + 90
    (approval,) = [r for r in session.audit() if r["event"] == "approval"]
    assert approval["request"] == request_id and approval["ttl"] == 90


def test_a_request_approved_once_cannot_be_approved_again(session: TerminalSession) -> None:
    request_id = session.request()
    approve_request(request_id, 60)
    with pytest.raises(ControlError) as refused:
        approve_request(request_id, 60)
    assert refused.value.code == "not_pending"


def test_an_unknown_request_is_refused(session: TerminalSession) -> None:
    with pytest.raises(ControlError) as refused:
        approve_request("web:00000000", 60)
    assert refused.value.code == "unknown_request"
