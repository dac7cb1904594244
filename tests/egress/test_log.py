"""The egress log: one JSON line per decision, bounded; its tally, for ``sandbridge status``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbridge.egress import log as egress_log
from sandbridge.egress.log import (
    LOG_NAME,
    MAX_REFUSED_DESTINATIONS,
    OTHER_DESTINATIONS,
    TALLY_NAME,
    EgressLog,
    read_entries,
    read_tally,
    summarise,
    tally,
)


def test_each_decision_is_one_json_line(tmp_path: Path) -> None:
    log = EgressLog(tmp_path / LOG_NAME)
    log.record(
        "allowed", "proxy", "pkgs.example.com:443", "allowed by 'pkgs.example.com'", "151.101.0.223"
    )
    log.record("refused", "host-service", "100.64.0.1:22", "not a host service")
    lines = (tmp_path / LOG_NAME).read_text().splitlines()
    assert [json.loads(line)["destination"] for line in lines] == [
        "pkgs.example.com:443",
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
    sizes = [(tmp_path / name).stat().st_size for name in (LOG_NAME, LOG_NAME + ".1")]
    assert {path.name for path in tmp_path.iterdir()} == {LOG_NAME, LOG_NAME + ".1", TALLY_NAME}
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
        log.record("allowed", "proxy", "pkgs.example.com:443", "allowed by 'pkgs.example.com'")
    log.record("refused", "proxy", "evil.example:443", "evil.example is not in the allowlist")
    (tmp_path / TALLY_NAME).open("a").write('not json\n{"count": "x"}\n')
    lines = summarise(read_tally(tmp_path))
    assert lines[0] == "egress: 3 allowed, 1 refused"
    assert lines[1].split()[:4] == ["refused", "proxy", "evil.example:443", "x1"]
    assert lines[1].endswith("(evil.example is not in the allowlist)")
    assert lines[2].split()[:4] == ["allowed", "proxy", "pkgs.example.com:443", "x3"]


def test_a_refusal_flood_past_rotation_leaves_earlier_allowed_egress_in_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(egress_log, "MAX_LOG_BYTES", 2000)
    log = EgressLog(tmp_path / LOG_NAME)
    for _ in range(3):
        log.record("allowed", "proxy", "pkgs.example.com:443", "allowed by 'pkgs.example.com'")
    for n in range(1000):
        log.record("refused", "proxy", f"flood{n}.example:443", "not in the allowlist")
    # The detail log rotated the allowed decisions away; the tally kept them.
    assert all(entry["decision"] == "refused" for entry in read_entries(tmp_path))
    lines = summarise(read_tally(tmp_path))
    assert lines[0] == "egress: 3 allowed, 1000 refused"
    assert any(
        line.split()[:4] == ["allowed", "proxy", "pkgs.example.com:443", "x3"] for line in lines
    )
    assert not (tmp_path / (TALLY_NAME + ".tmp")).exists()


def test_refused_destinations_past_their_budget_are_counted_together(tmp_path: Path) -> None:
    log = EgressLog(tmp_path / LOG_NAME)
    flood = MAX_REFUSED_DESTINATIONS + 100
    for n in range(flood):
        log.record("refused", "proxy", f"flood{n}.example:443", "not in the allowlist")
    log.record("allowed", "proxy", "pkgs.example.com:443", "allowed by 'pkgs.example.com'")
    tallies = read_tally(tmp_path)
    refused = [t for t in tallies if t.decision == "refused"]
    assert len(refused) == MAX_REFUSED_DESTINATIONS + 1
    assert refused[-1].destination == OTHER_DESTINATIONS and refused[-1].count == 100
    assert sum(t.count for t in refused) == flood
    # Refusals have their own budget: they cannot crowd an allowed destination out.
    assert [(t.destination, t.count) for t in tallies if t.decision == "allowed"] == [
        ("pkgs.example.com:443", 1)
    ]


def test_a_tally_remembers_first_and_last_time(tmp_path: Path) -> None:
    entries: list[dict[str, object]] = [
        {"time": 10.0, "decision": "allowed", "kind": "proxy", "destination": "a:443"},
        {"time": 20.0, "decision": "allowed", "kind": "proxy", "destination": "a:443"},
    ]
    [only] = tally(entries)
    assert (only.count, only.first, only.last) == (2, 10.0, 20.0)


def test_a_session_without_a_tally_is_summarised_from_its_log(tmp_path: Path) -> None:
    EgressLog(tmp_path / LOG_NAME).record("allowed", "proxy", "pkgs.example.com:443", "allowed")
    (tmp_path / TALLY_NAME).unlink()
    assert summarise(read_tally(tmp_path))[0] == "egress: 1 allowed, 0 refused"


def test_no_log_at_all_is_an_empty_summary(tmp_path: Path) -> None:
    assert summarise(read_tally(tmp_path)) == ["egress: 0 allowed, 0 refused"]


def test_each_decision_counted_is_told(tmp_path: Path) -> None:
    told: list[int] = []
    log = EgressLog(tmp_path / LOG_NAME)
    log.on_record = lambda: told.append(sum(t.count for t in log.tallies()))
    log.record("refused", "proxy", "a.example:80", "not allowed")
    log.record("allowed", "proxy", "b.example:443", "allow line 1")
    assert told == [1, 2], "told after each, with the tally already counted"


def test_a_decision_costs_one_tally_line_not_the_whole_file(tmp_path: Path) -> None:
    # Each decision rewrote the whole tally (up to 320 lines): in the daemon, whose one
    # event loop serves every session, a sandbox looping refused CONNECTs spent more than
    # half of that loop's time on one session's tally file.
    log = EgressLog(tmp_path / LOG_NAME)
    for number in range(256):
        log.record("allowed", "proxy", f"h{number}.test:443", "allowed by '*.test'", "1.2.3.4")
    for number in range(64):
        log.record("refused", "proxy", f"r{number}.test:443", "r.test is not in the allowlist")
    tally_file = tmp_path / TALLY_NAME
    whole = len(tally_file.read_bytes())
    written = 0
    for number in range(1000):
        before = tally_file.stat()
        log.record("refused", "proxy", f"flood{number}.test:443", "not in the allowlist")
        after = tally_file.stat()
        rewritten = after.st_ino != before.st_ino  # written whole, then renamed into place
        written += after.st_size if rewritten else after.st_size - before.st_size
    # A compaction (once the file holds four times the lines it needs) now and then; an
    # append otherwise: a small multiple of one whole file, not a thousand of them.
    assert written < 8 * whole
    assert read_tally(tmp_path) == log.tallies()
    [other] = [t for t in read_tally(tmp_path) if t.destination == OTHER_DESTINATIONS]
    assert other.count == 1000
