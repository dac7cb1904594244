"""The tree is lint-clean, formatted and type-checked strictly.

These run as tests so that they take a worker of their own beside the rest of the suite
(``./dev.sh test`` runs pytest-xdist) instead of before it, and so that a finding shows in
the suite's summary like any failure.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

CHECKED = ["src", "tests", "benchmarks"]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, check=False
    )


def test_ruff_finds_nothing() -> None:
    done = _run("ruff", "check", "--no-cache", *CHECKED)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_tree_is_formatted_as_ruff_formats_it() -> None:
    done = _run("ruff", "format", "--check", "--no-cache", *CHECKED)
    assert done.returncode == 0, done.stdout + done.stderr


# A cold mypy run of the whole tree takes about a minute of one core; more on a busy one.
@pytest.mark.timeout(900)
def test_mypy_strict_finds_nothing() -> None:
    done = _run("mypy")
    assert done.returncode == 0, done.stdout + done.stderr
