"""The benchmark's smoke run: every path and workload still runs (no claim about speed),
the remote benchmark's among them."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.remote_bench import METRICS as REMOTE_METRICS
from benchmarks.remote_bench import PATH_NAMES as REMOTE_PATH_NAMES
from tests.conftest import run_module

PATH_NAMES = ["direct", "sandbridge", "sandbridge-v1", "nginx", "socat", "jupyter-server-proxy"]
METRICS = [
    "c1_rps",
    "c64_rps",
    "c64_p99_ms",
    "get_100m_mbps",
    "post_100m_mbps",
    "ttfb_ms",
    "sse_p50_ms",
]
REMOTE_RATES = ("c64_rps", "c64_p99_ms", "get_100m_mbps")


def test_smoke_run_measures_every_path(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = run_module("benchmarks.relay_bench", "--smoke", "--json", str(out), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["medians"]) == set(PATH_NAMES)
    for name in PATH_NAMES:
        for metric in METRICS:
            assert report["medians"][name][metric] > 0, (name, metric)
        if name != "sandbridge-v1":
            assert report["medians"][name]["ws_msgs_per_s"] > 0, name
    assert report["ratio_to_nginx"]["sandbridge"]["c64_rps"] > 0
    assert report["scaling"]["sandbridge"]["apps"]["registration_p50_ms"] > 0
    assert "| c64_rps |" in result.stdout
    sessions = report["scaling"]["sessions"]
    for kind in ("daemon", "standalone", "bwrap"):
        assert sessions["start_ms"][kind] > 0, kind
    for key in ("served_shim_rss_kib_max", "served_client_rss_kib_median",
                "standalone_host_rss_kib_median", "standalone_shim_rss_kib_max"):  # fmt: skip
        assert sessions[key] > 0, key
    assert "| served by the daemon |" in result.stdout
    # The remote benchmark's smoke run, as ./dev.sh bench runs it (benchmarks/remote_bench.py's
    # measure_remote and table): a far app through connect (SSH and --via), ssh -L and
    # directly, over one real throwaway sshd.
    remote = report["scaling"]["remote"]
    for name in REMOTE_PATH_NAMES:
        for metric in REMOTE_RATES:
            assert remote["medians"][name][metric] > 0, (name, metric)
        for metric in REMOTE_METRICS:  # CPU in clock ticks: a short smoke GET may take none
            assert remote["medians"][name][metric] >= 0, (name, metric)
    for name in ("connect", "connect-via"):
        for metric in REMOTE_RATES:
            assert remote["ratio_to_ssh_L"][name][metric] > 0, (name, metric)
    assert "| far app through |" in result.stdout
    assert "| connect | " in result.stdout and "x ssh -L)" in result.stdout
    for key in ("machine", "nginx", "socat", "wrk", "jupyter-server-proxy"):
        assert report["versions"][key] not in ("", "missing"), key
