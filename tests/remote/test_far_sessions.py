"""What serve-stdio says of its sessions (remote/far_sessions.py), read from a real far
session: ``sandbridge host`` with its terminal broker, as the laptop's dashboard shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbridge.places.registry import SessionEntry
from sandbridge.protocol.far_sessions import parse
from sandbridge.remote.far_sessions import SessionDescriber
from tests.remote.test_terminal_relay import FarMachine, far

__all__ = ["far"]


def test_a_session_and_its_pending_request_are_described(far: FarMachine) -> None:
    asked = far.cli(
        "terminal", "request", "box", "--no-wait", "--reason", "look", "--duration", "2m"
    )
    assert asked.returncode == 0, asked.stderr
    [described] = SessionDescriber().describe()
    assert described.id == "box" and described.started > 0
    [request] = described.requests
    assert (request.id, request.state, request.reason, request.duration) == (
        asked.stdout.strip(), "pending", "look", 120.0,
    )  # fmt: skip
    # What it says passes the laptop's checks as it is.
    assert parse("box", described.to_json()) == described


def test_a_session_without_a_control_socket_is_described_by_its_registry_facts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    entry = SessionEntry.create("quiet", tmp_path)
    try:
        [described] = SessionDescriber().describe()
        assert (described.id, described.workdir) == ("quiet", str(tmp_path))
        assert (described.command, described.network, described.requests) == (None, None, ())
    finally:
        entry.remove()
