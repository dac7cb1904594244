"""The suite's files are collected longest first, and a recording run writes each file's
seconds (tests/file_seconds.py), checked on a small suite of its own run by a real pytest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import file_seconds
from tests.conftest import REPO

CONFTEST = """\
from pathlib import Path

from tests import file_seconds

SECONDS = Path(__file__).parent / "seconds.json"


def pytest_collection_modifyitems(items):
    file_seconds.longest_first(items, file_seconds.load(SECONDS))


def pytest_configure(config):
    config.pluginmanager.register(file_seconds.Recorder(SECONDS))
"""


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """Four test files of two tests each, and the conftest that orders and records them."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    for name in ("a", "b", "c", "d"):
        (tmp_path / f"test_{name}.py").write_text(
            f"def test_{name}_one():\n    pass\n\n\ndef test_{name}_two():\n    pass\n"
        )
    return tmp_path


def _pytest(suite: Path, *args: str) -> list[str]:
    """The node ids pytest ran (or collected) in ``suite``, in its order."""
    # Without the installed plugins (xdist, hypothesis, timeout...): none is needed here.
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN", *args],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return [line for line in run.stdout.splitlines() if "::" in line]


def test_files_are_collected_longest_first_each_keeping_its_own_order(suite: Path) -> None:
    (suite / "seconds.json").write_text(
        json.dumps({"test_a.py": 1.0, "test_b.py": 30.0, "test_c.py": 0.5, "test_d.py": 12.0})
    )
    assert _pytest(suite, "--collect-only") == [
        "test_b.py::test_b_one",
        "test_b.py::test_b_two",
        "test_d.py::test_d_one",
        "test_d.py::test_d_two",
        "test_a.py::test_a_one",
        "test_a.py::test_a_two",
        "test_c.py::test_c_one",
        "test_c.py::test_c_two",
    ]


def test_a_file_not_measured_yet_is_placed_at_the_median(suite: Path) -> None:
    (suite / "seconds.json").write_text(
        json.dumps({"test_a.py": 1.0, "test_b.py": 30.0, "test_c.py": 0.5})
    )
    files = [nodeid.split("::")[0] for nodeid in _pytest(suite, "--collect-only")]
    assert list(dict.fromkeys(files)) == ["test_b.py", "test_a.py", "test_d.py", "test_c.py"]


def test_without_seconds_the_collection_order_is_kept(suite: Path) -> None:
    files = [nodeid.split("::")[0] for nodeid in _pytest(suite, "--collect-only")]
    assert list(dict.fromkeys(files)) == ["test_a.py", "test_b.py", "test_c.py", "test_d.py"]


def test_a_run_records_the_files_it_ran_and_keeps_the_others_that_still_exist(
    suite: Path,
) -> None:
    (suite / "seconds.json").write_text(json.dumps({"test_d.py": 99.0, "test_gone.py": 5.0}))
    _pytest(suite, "-v", "test_a.py", "test_b.py")
    seconds = file_seconds.load(suite / "seconds.json")
    assert sorted(seconds) == ["test_a.py", "test_b.py", "test_d.py"]
    assert seconds["test_d.py"] == 99.0
    assert all(value >= 0 for value in seconds.values())
