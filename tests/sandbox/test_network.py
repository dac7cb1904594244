"""The allow mode's network namespace set-up, on the host side of the sandbox."""

from __future__ import annotations

from pathlib import Path

from tests.sandbox.test_unshare import run_in_planted_workdir


def test_modules_in_the_working_directory_are_not_the_net_inits(tmp_path: Path, xdg: Path) -> None:
    # net_init runs on the host, in the run's working directory (it did import the
    # workdir's modules before -P).
    assert run_in_planted_workdir(tmp_path, "--backend", "bwrap", "--net", "allow") == []
