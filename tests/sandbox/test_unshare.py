"""The unshare backend's host side: what its first process imports."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import PYTHON, SANDBRIDGE, run_argv

# A module of the standard library's name that records where it ran (beside the
# directory it lies in), then gives way to the real one.
PLANTED = """
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
open(os.path.join(os.path.dirname(here), f"planted-ran-{os.getpid()}"), "w").close()
del sys.modules["select"]
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != here]
import select
"""


def run_in_planted_workdir(tmp_path: Path, *options: str) -> list[Path]:
    """``sandbridge run OPTIONS -- true`` from (and in) a workdir holding ``select.py``;
    the markers of the processes that imported it."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "select.py").write_text(PLANTED)
    # The console script, as a user runs it (``python -m`` would put the working directory
    # on the client's own path: the user's choice, not sandbridge's).
    command = run_argv(work, "true", options=(*options, "--no-daemon"))[len(SANDBRIDGE) :]
    argv = [str(Path(PYTHON).parent / "sandbridge"), *command]
    result = subprocess.run(
        argv,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return list(tmp_path.glob("planted-ran-*"))


def test_modules_in_the_working_directory_are_not_the_unshare_inits(
    tmp_path: Path, xdg: Path
) -> None:
    # The run's working directory is usually the workdir, which the sandbox writes: its
    # modules must never run outside the sandbox (here: unshare_init before the pivot,
    # with the host's files as the user's; it did before -P).
    assert run_in_planted_workdir(tmp_path, "--backend", "unshare", "--net", "none") == []
