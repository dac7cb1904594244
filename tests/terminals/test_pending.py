"""Open terminal requests kept for a restart of the daemon: read back whole or not at all."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from sandbridge.terminals.pending import MAX_FILE_BYTES, Pending, load, save


def test_what_was_saved_is_loaded(tmp_path: Path) -> None:
    kept = Pending("c0ffee", (("web:1", {"body": "b", "signature": "s"}),), ("ab" * 32,))
    save(tmp_path / "terminals.json", kept)
    assert load(tmp_path / "terminals.json") == kept


def test_the_file_is_private(tmp_path: Path) -> None:
    save(tmp_path / "terminals.json", Pending("c0ffee"))
    assert stat.S_IMODE((tmp_path / "terminals.json").stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json",
        b"[]",
        b'{"requests": []}',
        b'{"instance": 3, "requests": []}',
        b'{"instance": "x", "requests": {}}',
        b'{"instance": "x", "requests": [], "requesters": "ab"}',
        b'{"instance": "x", "requests": [], "pad": "' + b"a" * MAX_FILE_BYTES + b'"}',
    ],
)
def test_an_unusable_file_gives_nothing(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "terminals.json").write_bytes(content)
    assert load(tmp_path / "terminals.json") is None


def test_malformed_entries_are_left_out(tmp_path: Path) -> None:
    (tmp_path / "terminals.json").write_text(
        '{"instance": "x", "requests": [["web:1", {}], [2, {}], ["web:3"], "web:4"]}'
    )
    assert load(tmp_path / "terminals.json") == Pending("x", (("web:1", {}),))


def test_a_missing_file_gives_nothing(tmp_path: Path) -> None:
    assert load(tmp_path / "terminals.json") is None
