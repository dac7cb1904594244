"""``sandbridge doctor``: every check printed with its fix, ``--json``, and an exit status
that fails only when something a session needs is missing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from sandbridge.agents import catalogue
from sandbridge.doctor.checks import CHECKS
from tests.support.command_in_process import sandbridge


def _doctor(tmp_path: Path, *options: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "run").mkdir(mode=0o700, exist_ok=True)
    own = {
        "HOME": str(tmp_path / "home"),
        "XDG_RUNTIME_DIR": str(tmp_path / "run"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    # In this process (tests/support/command_in_process.py): what doctor finds and says.
    return sandbridge("doctor", *options, env={**os.environ, **own, **env})


def test_doctor_prints_every_check_and_a_fix_under_each_warning(tmp_path: Path) -> None:
    result = _doctor(tmp_path, DISPLAY="", WAYLAND_DISPLAY="")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    checks = [line for line in lines if not line.startswith(" ")]
    # one line per declared check, then one per agent profile (shipped: none of the owner's)
    assert len(checks) == len(CHECKS) + len(list(catalogue.SHIPPED_DIR.glob("*.toml")))
    assert checks[0].startswith("ok    sandbox backend: ")
    browser = lines.index(next(line for line in lines if "desktop browser" in line))
    assert lines[browser].startswith("warn  desktop browser: ")
    assert lines[browser + 1].startswith("      fix: ")


def test_doctor_json_lists_each_check_with_status_found_and_fix(tmp_path: Path) -> None:
    result = _doctor(tmp_path, "--json")
    assert result.returncode == 0
    report = json.loads(result.stdout)
    assert report["ok"] is True
    names = [check["name"] for check in report["checks"]]
    assert names[:3] == ["sandbox backend", "user namespaces", "front door"]
    assert {"runtime dirs", "state dir", "known projects", "systemd user session"} <= set(names)
    for check in report["checks"]:
        assert set(check) == {"name", "status", "found", "fix"}
        assert check["status"] in {"ok", "warn", "fail"}
        assert bool(check["fix"]) == (check["status"] != "ok"), check


def test_doctor_exits_1_when_a_session_could_not_start(tmp_path: Path) -> None:
    # No sandbox backend on this PATH: the one thing `run` cannot do without.
    (tmp_path / "bin").mkdir()
    result = _doctor(tmp_path, "--json", PATH=str(tmp_path / "bin"))
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["checks"][0]["status"] == "fail"
    assert report["checks"][0]["name"] == "sandbox backend"
