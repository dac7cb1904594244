"""doctor's agent checks: one per profile, named after it; a profile that cannot be read
is one warning naming its file, and the other checks still run."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbridge.doctor.agent_checks import profile_checks
from sandbridge.doctor.finding import Status, run_checks


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    directory = tmp_path / "sandbridge" / "agents"
    directory.mkdir(parents=True)
    return directory


def test_each_profile_is_one_check_named_after_it(config: Path) -> None:
    (config / "mine.toml").write_text('command = ["no-such-agent-7c1"]\n')
    checks = profile_checks()
    assert "agent_mine" in [check.__name__ for check in checks]
    findings = {finding.name: finding for finding in run_checks(checks)}
    assert findings["agent mine"].status is Status.OK
    assert findings["agent mine"].found == (
        "not installed (no-such-agent-7c1 is not on PATH); no state kept yet"
    )


def test_a_profile_that_cannot_be_read_is_one_warning_naming_it(config: Path) -> None:
    (config / "bad.toml").write_text('command = ["x"]\nhosts = ["gate:22"]\n')
    (finding,) = run_checks(profile_checks())
    assert finding.status is Status.WARN
    assert finding.found.startswith(f"{config / 'bad.toml'}:hosts: ")
    assert finding.fix == "fix or remove that profile file"
