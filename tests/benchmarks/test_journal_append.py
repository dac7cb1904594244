"""The journal benchmark's short run: both kinds of append measured for this tree and
another beside it (no claim about speed)."""

from __future__ import annotations

import re

from tests.conftest import REPO, run_module


def test_a_short_run_reports_both_appends_for_each_tree() -> None:
    result = run_module(
        "benchmarks.journal_append", "--appends", "4", "--other", str(REPO / "src"), timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = re.findall(r"^\| (this|other) \| (\d+\.\d+) \| (\d+\.\d+) \|$", result.stdout, re.M)
    assert [row[0] for row in rows] == ["this", "other"], result.stdout
    assert all(float(audit) > 0 and float(reserve) > 0 for _, audit, reserve in rows), rows
