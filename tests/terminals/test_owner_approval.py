"""The owner's approval, signed with the owner key, as the CLI and the dashboard send it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.exceptions import ControlError
from sandbridge.terminals import approval
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


def test_without_a_ttl_the_approval_lasts_the_duration_the_request_asked(
    session: TerminalSession,
) -> None:
    request_id = session.cli(
        "terminal", "request", "web", "--no-wait", "--duration", "90s"
    ).stdout.strip()
    listing = session.cli("terminal", "list").stdout
    assert f"{request_id}  pending" in listing and "  90s  " in listing
    answer = approve_request(request_id)
    assert answer["ttl"] == 90
    assert time.time() + 80 < float(answer["expires"]) <= time.time() + 90


def test_without_a_ttl_or_an_asked_duration_the_approval_lasts_ten_minutes(
    session: TerminalSession,
) -> None:
    answer = approve_request(session.request())
    assert answer["ttl"] == approval.DEFAULT_TTL == 600


def test_the_owner_may_approve_for_another_duration_than_asked(session: TerminalSession) -> None:
    request_id = session.cli(
        "terminal", "request", "web", "--no-wait", "--duration", "1h"
    ).stdout.strip()
    session.cli("terminal", "approve", request_id, "--duration", "2m")
    (record,) = [r for r in session.audit() if r["event"] == "approval"]
    assert record["ttl"] == 120
    (asked,) = [r for r in session.audit() if r["event"] == "request"]
    assert asked["duration"] == 3600


@pytest.mark.parametrize(
    ("given", "said"),
    [("25h", "--duration '25h': choose between 6s and 24h"), ("soon", "--duration 'soon'")],
)
def test_a_duration_over_the_longest_approval_or_malformed_is_refused_naming_it(
    session: TerminalSession, given: str, said: str
) -> None:
    result = session.cli(
        "terminal", "request", "web", "--no-wait", "--duration", given, check=False
    )
    assert result.returncode == 2
    assert said in result.stderr
