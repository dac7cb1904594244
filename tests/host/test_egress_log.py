"""The egress log: one JSON line per decision, bounded, summarised for ``sandbridge status``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbridge.host import egress_log
from sandbridge.host.egress_log import LOG_NAME, EgressLog, read_entries, summarise


def test_each_decision_is_one_json_line(tmp_path: Path) -> None:
    log = EgressLog(tmp_path / LOG_NAME)
    log.record("allowed", "proxy", "pypi.org:443", "allowed by 'pypi.org'", "151.101.0.223")
    log.record("refused", "host-service", "100.64.0.1:22", "not a host service")
    lines = (tmp_path / LOG_NAME).read_text().splitlines()
    assert [json.loads(line)["destination"] for line in lines] == [
        "pypi.org:443",
        "100.64.0.1:22",
    ]
    assert set(json.loads(lines[0])) == {
        "time",
        "decision",
        "kind",
        "destination",
        "address",
        "reason",
    }


def test_the_log_rotates_and_stays_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(egress_log, "MAX_LOG_BYTES", 2000)
    log = EgressLog(tmp_path / LOG_NAME)
    for n in range(200):
        log.record("refused", "proxy", f"flood{n}.example:443", "not in the allowlist")
    sizes = [path.stat().st_size for path in tmp_path.iterdir()]
    assert sorted(path.name for path in tmp_path.iterdir()) == [LOG_NAME, LOG_NAME + ".1"]
    assert all(size <= 2000 for size in sizes)
    entries = read_entries(tmp_path)
    assert entries[-1]["destination"] == "flood199.example:443"


def test_hostile_names_are_cut_to_a_bounded_field(tmp_path: Path) -> None:
    log = EgressLog(tmp_path / LOG_NAME)
    log.record("refused", "proxy", "a" * 10_000, "r" * 10_000)
    entry = read_entries(tmp_path)[0]
    assert len(str(entry["destination"])) == egress_log.MAX_FIELD_CHARS
    assert len(str(entry["reason"])) == egress_log.MAX_FIELD_CHARS


def test_summary_counts_by_destination_refusals_first(tmp_path: Path) -> None:
    log = EgressLog(tmp_path / LOG_NAME)
    for _ in range(3):
        log.record("allowed", "proxy", "pypi.org:443", "allowed by 'pypi.org'")
    log.record("refused", "proxy", "evil.example:443", "evil.example is not in the allowlist")
    (tmp_path / LOG_NAME).open("a").write("not json\n")
    lines = summarise(read_entries(tmp_path))
    assert lines[0] == "egress: 3 allowed, 1 refused"
    assert lines[1].split()[:4] == ["refused", "proxy", "evil.example:443", "x1"]
    assert lines[1].endswith("(evil.example is not in the allowlist)")
    assert lines[2].split()[:4] == ["allowed", "proxy", "pypi.org:443", "x3"]


def test_no_log_at_all_is_an_empty_summary(tmp_path: Path) -> None:
    assert summarise(read_entries(tmp_path)) == ["egress: 0 allowed, 0 refused"]
