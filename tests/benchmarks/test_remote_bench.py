"""The remote benchmark's smoke run: a far app through ``sandbridge connect`` (SSH and
``--via``), ``ssh -L`` and directly, over a real throwaway sshd, each measured (no claim
about speed)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.remote_bench import METRICS, PATH_NAMES
from tests.conftest import run_module

RATES = ("c64_rps", "c64_p99_ms", "get_100m_mbps")


def test_smoke_run_measures_every_path_through_the_same_sshd(tmp_path: Path) -> None:
    out = tmp_path / "remote.json"
    result = run_module("benchmarks.remote_bench", "--smoke", "--json", str(out), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    for name in PATH_NAMES:
        for metric in RATES:
            assert report["medians"][name][metric] > 0, (name, metric)
        for metric in METRICS:  # CPU in clock ticks: a short smoke GET may take none
            assert report["medians"][name][metric] >= 0, (name, metric)
    for name in ("connect", "connect-via"):
        for metric in RATES:
            assert report["ratio_to_ssh_L"][name][metric] > 0, (name, metric)
    assert "| connect | " in result.stdout and "x ssh -L)" in result.stdout
