"""Fixtures of the terminals' end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.terminals.harness import TerminalSession


@pytest.fixture
def session(tmp_path: Path) -> Iterator[TerminalSession]:
    # -v: the session's events (terminal.ended) on its stderr
    running = TerminalSession(tmp_path, options=("-v",))
    yield running
    running.stop()
