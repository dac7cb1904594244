"""The suite's files run longest first, from their measured seconds.

``./dev.sh test`` runs pytest-xdist with ``--dist loadfile``: each test file runs whole on
one worker, and a worker that is nearly done is handed the next file in the collection's
order (with ``--no-loadscope-reorder``; xdist's default reorders files by their number of
tests, which says little about their time). The suite's wall time is then at least its
longest file's, and a long file handed out last runs alone at the end while the other
workers idle. Sorting the files by their measured seconds, longest first, is the classic
greedy schedule (longest processing time first): the long files start at once, side by
side, and the many short ones fill the gaps.

The seconds are ``tests/file_seconds.json``'s, measured by a whole run with
``--record-file-seconds`` (``./dev.sh test --record-file-seconds`` from a clean clone) and
checked in. A file it does not name yet (a new one) is placed as a typical file is: at
the median. The order changes where the tests run, never what they check.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

SECONDS_FILE = Path(__file__).resolve().parent / "file_seconds.json"
# Measured seconds are rounded to this many decimals in the file: finer says nothing on a
# shared machine, and rounder lines diff better.
DECIMALS = 1


def file_of(nodeid: str) -> str:
    """The test file a node id is in, as the seconds file names it."""
    return nodeid.split("::", 1)[0]


def load(path: Path = SECONDS_FILE) -> dict[str, float]:
    """The measured seconds per file; none when the file is missing."""
    if not path.is_file():
        return {}
    seconds = json.loads(path.read_text())
    return {str(name): float(value) for name, value in seconds.items()}


def longest_first(items: list[pytest.Item], seconds: dict[str, float]) -> None:
    """Sort ``items`` in place: files by their seconds, longest first; each file's tests
    keep their order, and files of equal seconds keep theirs."""
    typical = statistics.median(seconds.values()) if seconds else 0.0
    items.sort(key=lambda item: -seconds.get(file_of(item.nodeid), typical))


class Recorder:
    """Adds up each file's test durations (setup, call and teardown) as the reports come
    in; under pytest-xdist the controller sees every worker's reports."""

    def __init__(self, path: Path = SECONDS_FILE) -> None:
        self.path = path
        self.measured: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = file_of(report.nodeid)
        self.measured[name] = self.measured.get(name, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):
            return  # the controller writes
        self.write(Path(session.config.rootpath))

    def write(self, root: Path) -> None:
        """Merge what this run measured into the file: the files measured get their new
        seconds, files that no longer exist are dropped, the rest keep theirs."""
        seconds = {
            name: value for name, value in load(self.path).items() if (root / name).is_file()
        }
        seconds.update({name: round(value, DECIMALS) for name, value in self.measured.items()})
        ordered = dict(sorted(seconds.items()))
        self.path.write_text(json.dumps(ordered, indent=1) + "\n")
