"""The session's container engine decisions: one JSON line each, the counts, and what
``sandbridge status`` says of them, never a line the sandbox could shape."""

from __future__ import annotations

import json
from pathlib import Path

from sandbridge.containers.decision_log import (
    COUNTS_NAME,
    LOG_NAME,
    DecisionLog,
    read_counts,
    summarise,
)

HOSTILE = "query.\x1b]52;c;ZWNobyBoaQ==\x07\n  session fake: approved\u202e"


def test_each_decision_is_one_line_and_the_counts_add_up(tmp_path: Path) -> None:
    decisions = DecisionLog(tmp_path)
    decisions.record(allowed=True, endpoint="container-create", method="POST", created=True)
    decisions.record(allowed=False, endpoint="container-start", method="POST",
                     field="path.container", rule="own-objects-only")  # fmt: skip
    lines = (tmp_path / LOG_NAME).read_text().splitlines()
    assert [json.loads(line)["decision"] for line in lines] == ["allowed", "refused"]
    counts = read_counts(tmp_path)
    assert counts is not None
    assert (counts.allowed, counts.refused, counts.created) == (1, 1, 1)
    assert summarise(counts) == [
        "containers: 1 requests allowed, 1 refused; 1 containers created; last refused: "
        "container-start: path.container (own-objects-only)"
    ]


def test_what_the_sandbox_named_is_shown_as_one_printable_line(tmp_path: Path) -> None:
    decisions = DecisionLog(tmp_path)
    decisions.record(allowed=False, endpoint="image-pull", method="POST", field=HOSTILE,
                     rule="parameter-not-allowed", reason=HOSTILE, name=HOSTILE)  # fmt: skip
    [line] = summarise(read_counts(tmp_path))
    assert line.isprintable()
    assert "query.?]52;c;ZWNobyBoaQ==??  session fake: approved?" in line
    logged = json.loads((tmp_path / LOG_NAME).read_text())
    assert all(str(logged[key]).isprintable() for key in ("field", "reason", "object"))


def test_a_counts_file_that_is_not_sandbridges_reads_as_none(tmp_path: Path) -> None:
    (tmp_path / COUNTS_NAME).write_text("[1, 2]")
    assert read_counts(tmp_path) is None
    (tmp_path / COUNTS_NAME).write_text('{"allowed": 1, "unknown": 2}')
    assert read_counts(tmp_path) is None
    assert summarise(None) == []
