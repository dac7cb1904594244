"""The reservation journal and audit log: single use, bounded, durable, fail closed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbridge.exceptions import JournalError
from sandbridge.terminals.journal import MAX_RECORD_BYTES, AuditLog, RecordRing, ReservationJournal

NOW = 1000.0


def test_a_nonce_is_reserved_once_even_by_a_new_journal_object(tmp_path: Path) -> None:
    ReservationJournal(tmp_path).reserve("n1", NOW + 60, {"session": "web"}, NOW)
    with pytest.raises(JournalError) as refused:
        ReservationJournal(tmp_path).reserve("n1", NOW + 60, {"session": "web"}, NOW)
    assert refused.value.code == "used"


def test_ended_reservations_stay_used(tmp_path: Path) -> None:
    journal = ReservationJournal(tmp_path)
    seq = journal.reserve("n1", NOW + 60, {}, NOW)
    journal.finish(seq, "ended")
    assert journal.ring.records()[0]["state"] == "ended"
    with pytest.raises(JournalError):
        journal.reserve("n1", NOW + 60, {}, NOW)


def test_the_ring_is_bounded_and_replaces_the_oldest(tmp_path: Path) -> None:
    ring = RecordRing(tmp_path / "ring", slots=4)
    for index in range(10):
        ring.append({"n": index})
    assert [record["n"] for record in ring.records()] == [6, 7, 8, 9]
    assert len([p for p in (tmp_path / "ring").iterdir() if p.suffix == ".json"]) == 4


def test_rings_of_several_processes_append_in_one_sequence(tmp_path: Path) -> None:
    """Each ring object remembers its own last append and looks only past it for those of
    others (every session of a user shares the audit log): whatever the interleaving, the
    sequence has no gap and no number twice."""
    rings = [RecordRing(tmp_path / "ring", slots=8) for _ in range(3)]
    order = [0, 0, 1, 2, 2, 2, 0, 1, 1, 0, 2, 1, 0, 0, 0]
    seqs = [rings[which].append({"by": which}) for which in order]
    assert seqs == list(range(len(order)))
    kept = rings[0].records()
    assert [record["seq"] for record in kept] == list(range(len(order) - 8, len(order)))
    assert [record["by"] for record in kept] == order[-8:]


def test_a_ring_left_behind_by_a_whole_turn_reads_the_ring_again(tmp_path: Path) -> None:
    """Past ``slots`` appends by others, the slot of the last append remembered holds
    another record: the next append reads the whole ring to find the newest."""
    stale, busy = RecordRing(tmp_path / "ring", slots=4), RecordRing(tmp_path / "ring", slots=4)
    assert stale.append({"n": 0}) == 0
    for index in range(1, 9):
        assert busy.append({"n": index}) == index
    assert stale.append({"n": 9}) == 9
    assert [record["n"] for record in busy.records()] == [6, 7, 8, 9]


def test_a_ring_left_behind_by_one_append_short_of_a_turn_continues_the_sequence(
    tmp_path: Path,
) -> None:
    stale, busy = RecordRing(tmp_path / "ring", slots=4), RecordRing(tmp_path / "ring", slots=4)
    assert stale.append({"n": 0}) == 0
    for index in range(1, 4):  # slots - 1 appends: the remembered record is still there
        assert busy.append({"n": index}) == index
    assert stale.append({"n": 4}) == 4
    assert [record["n"] for record in busy.records()] == [1, 2, 3, 4]


def test_a_record_out_of_sequence_makes_an_append_read_the_whole_ring(tmp_path: Path) -> None:
    """What this class never writes (a record placed by hand, a restored copy) is not
    walked past: the append reads the whole ring and goes on after the newest, as before."""
    ring = RecordRing(tmp_path / "ring", slots=8)
    for index in range(3):
        ring.append({"n": index})
    (ring.path / "003.json").write_text('{"seq": 1004, "n": "placed"}')
    assert ring.append({"n": "next"}) == 1005
    assert RecordRing(tmp_path / "ring", slots=8).append({"n": "other"}) == 1006
    assert ring.append({"n": "last"}) == 1007


def test_a_ring_whose_remembered_record_is_gone_reads_the_ring_again(tmp_path: Path) -> None:
    ring = RecordRing(tmp_path / "ring", slots=8)
    for index in range(3):
        ring.append({"n": index})
    (ring.path / "002.json").unlink()  # the newest, as an owner's clean-up might
    assert ring.append({"n": "after"}) == 2  # the newest readable is seq 1
    (ring.path / "002.json").write_text("not json")
    assert RecordRing(tmp_path / "ring", slots=8).append({"n": "fresh"}) == 2


def test_what_is_not_a_record_in_the_ring_is_skipped_and_never_waited_on(tmp_path: Path) -> None:
    # The ring is the owner's private directory; whatever lands there anyway is read past,
    # and a FIFO (which a plain open waits on for a writer) holds nothing up.
    ring = RecordRing(tmp_path / "ring", slots=8)
    ring.append({"n": "kept"})
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"seq": 7, "n": "linked"}')
    os.mkfifo(ring.path / "001.json")
    (ring.path / "002.json").symlink_to(elsewhere)
    (ring.path / "003.json").mkdir()
    (ring.path / "004.json").write_text('{"seq": 4, "pad": "' + "x" * MAX_RECORD_BYTES + '"}')
    (ring.path / "005.json").write_text("not json")
    (ring.path / "006.json").write_text('{"seq": "6"}')
    (ring.path / "007.json").write_text("[7]")
    (ring.path / "note.txt").write_text('{"seq": 9}')
    assert [record["n"] for record in ring.records()] == ["kept"]
    assert ring.append({"n": "next"}) == 1


def test_a_record_over_16_kib_is_refused(tmp_path: Path) -> None:
    ring = RecordRing(tmp_path / "ring")
    with pytest.raises(JournalError) as refused:
        ring.append({"x": "y" * MAX_RECORD_BYTES})
    assert refused.value.code == "record_too_big"
    assert ring.records() == []


def test_a_full_journal_fails_closed_while_the_oldest_approval_is_valid(tmp_path: Path) -> None:
    journal = ReservationJournal(tmp_path, slots=2)
    journal.reserve("a", NOW + 10, {}, NOW)
    journal.reserve("b", NOW + 100, {}, NOW)
    with pytest.raises(JournalError) as refused:
        journal.reserve("c", NOW + 100, {}, NOW)
    assert refused.value.code == "journal_full"
    journal.reserve("c", NOW + 100, {}, NOW + 11)  # "a" expired: its slot may be reused
    assert [r["nonce"] for r in journal.ring.records()] == ["b", "c"]


def test_a_reservation_of_a_dead_host_is_recorded_as_aborted(tmp_path: Path) -> None:
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; "
            "from sandbridge.terminals.journal import ReservationJournal; "
            "ReservationJournal(Path(sys.argv[1])).reserve('n', 2e9, {}, 0)",
            str(tmp_path),
        ],
        check=True,
    )
    assert child.returncode == 0
    journal = ReservationJournal(tmp_path)
    journal.reserve("mine", 2e9, {}, 0)
    aborted = journal.abort_orphans()
    assert [record["nonce"] for record in aborted] == ["n"]
    states = {r["nonce"]: r["state"] for r in journal.ring.records()}
    assert states == {"n": "aborted", "mine": "reserved"}
    with pytest.raises(JournalError):
        journal.reserve("n", 2e9, {}, 0)


def test_journal_dirs_are_private_and_a_loose_one_is_refused(tmp_path: Path) -> None:
    ReservationJournal(tmp_path / "j")
    assert os.stat(tmp_path / "j").st_mode & 0o777 == 0o700
    os.chmod(tmp_path / "j", 0o755)
    with pytest.raises(JournalError) as refused:
        ReservationJournal(tmp_path / "j")
    assert refused.value.code == "unsafe_dir"


def test_audit_takes_metadata_fields_only(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path)
    audit.record("end", session="web", bytes_in=3, bytes_out=4, end="exit", status=0)
    with pytest.raises(ValueError, match="not metadata"):
        audit.record("end", output="secret screen")
    (record,) = audit.records()
    assert record["event"] == "end" and record["bytes_out"] == 4
