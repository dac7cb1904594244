"""``sandbridge terminal ...`` as the owner runs it (``cli/terminal.py``): real processes
over the test's own state dir."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandbridge.terminals.journal import AuditLog
from tests.support.command_in_process import sandbridge

# 2026-12-06 07:10:08 UTC
WHEN = 1796541008.25


def _env(tmp_path: Path, tz: str) -> dict[str, str]:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    return {
        **os.environ,
        "HOME": str(tmp_path),
        "XDG_RUNTIME_DIR": str(runtime),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "TZ": tz,
    }


def _audit(env: dict[str, str], *options: str) -> str:
    result = sandbridge("terminal", "audit", *options, env=env)  # in this process
    assert (result.returncode, result.stderr) == (0, "")
    return result.stdout


def _recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **fields: object) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    AuditLog().ring.append({"event": "approval", "time": WHEN, **fields})


@pytest.mark.parametrize(
    ("tz", "time", "expires"),
    [
        ("UTC0", "2026-12-06T07:10:08+00:00", "2026-12-06T07:20:08+00:00"),
        ("CET-1", "2026-12-06T08:10:08+01:00", "2026-12-06T08:20:08+01:00"),
    ],
)
def test_audit_times_are_iso_8601_local_to_the_second_with_the_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tz: str, time: str, expires: str
) -> None:
    _recorded(tmp_path, monkeypatch, session="web", request="web:1a2b", ttl=600, expires=WHEN + 600)
    assert _audit(_env(tmp_path, tz)) == (
        f"{time}  approval  expires={expires} request=web:1a2b session=web ttl=600\n"
    )


def test_audit_json_keeps_the_machine_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _recorded(tmp_path, monkeypatch, expires=WHEN + 600)
    (record,) = json.loads(_audit(_env(tmp_path, "UTC0"), "--json"))
    assert (record["time"], record["expires"]) == (WHEN, WHEN + 600)


def test_a_requesters_reason_cannot_drive_the_owners_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _recorded(tmp_path, monkeypatch, reason="fix\x1b]52;c;Y3VybA==\x07\nfake line")
    assert _audit(_env(tmp_path, "UTC0")) == (
        "2026-12-06T07:10:08+00:00  approval  reason=fix?]52;c;Y3VybA==??fake line\n"
    )
