"""The session-start A/B's short run: both trees start their sessions with remembered
projects and are reported (no claim about speed)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import run_module

SRC = Path(__file__).resolve().parents[2] / "src"


def test_short_run_reports_both_trees_with_remembered_projects() -> None:
    result = run_module(
        "benchmarks.ab_session_start",
        f"again={SRC}",
        *("--samples", "1", "--projects", "2"),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "1 samples, 2 remembered projects" in result.stdout, result.stdout
    reported = {
        label: (float(run), float(cpu))
        for label, run, cpu in re.findall(
            r"^(\S+): run (\d+\.\d+) ms, over bwrap \+?-?\d+\.\d+ ms, CPU (\d+\.\d+) ms",
            result.stdout,
            re.M,
        )
    }
    assert set(reported) == {"this", "again"}, result.stdout
    assert all(run > 0 and cpu > 0 for run, cpu in reported.values()), reported
