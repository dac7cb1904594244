"""The first-byte benchmark's short run: every path, the Python floor relays included,
answers and is reported (no claim about speed)."""

from __future__ import annotations

import re

from tests.conftest import run_module


def test_short_run_reports_every_path_with_the_floor_relays() -> None:
    result = run_module(
        "benchmarks.first_byte", "--blocks", "4", "--block", "2", "--floor", timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reported = dict(
        re.findall(r"^(\S+)\s+ttfb median (\d+\.\d+) ms; paired ratio", result.stdout, re.M)
    )
    assert set(reported) == {"nginx", "sandbridge", "py-floor", "py-floor+http"}, result.stdout
    assert all(float(ms) > 0 for ms in reported.values()), reported
