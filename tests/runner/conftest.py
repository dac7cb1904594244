"""Fixtures of the runner tests: each backend, and a private runtime base per test."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

BACKENDS = ["bwrap", "unshare"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private XDG_RUNTIME_DIR so each test sees only its own runtime dirs."""
    path = tmp_path / "xdg"
    path.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(path))
    return path


NOBODY = 65534


@dataclass
class Nobody:
    """``sandbridge run`` as nobody, with Debian's python3 (the test's own Python may live
    under /root, out of nobody's reach), in a work dir and runtime base nobody owns."""

    work: Path
    xdg: Path

    @property
    def env(self) -> dict[str, str]:
        site = next(p for p in sys.path if p.endswith("site-packages") and ".venv" in p)
        return {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.work),
            "XDG_RUNTIME_DIR": str(self.xdg),
            "PYTHONPATH": f"{REPO / 'src'}:{site}:{REPO}",
        }

    def run_argv(self, backend: str, *options: str) -> list[str]:
        """The command line up to (not including) ``-- CMD``."""
        return [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            "/usr/bin/python3",
            "-m",
            "sandbridge.cli",
            "run",
            "--backend",
            backend,
            "--workdir",
            str(self.work),
            "--ro-bind",
            str(REPO),
            "--env",
            "PYTHONPATH",
            *options,
        ]


@pytest.fixture
def nobody() -> Iterator[Nobody]:
    assert os.getuid() == 0, "this test switches to an unprivileged user and needs root"
    top = Path(tempfile.mkdtemp(prefix="sandbridge-unpriv-", dir="/tmp"))
    os.chmod(top, 0o755)
    work, xdg = top / "work", top / "xdg"
    work.mkdir()
    xdg.mkdir(mode=0o700)
    for path in (work, xdg):
        os.chown(path, NOBODY, NOBODY)
    yield Nobody(work, xdg)
    shutil.rmtree(top, ignore_errors=True)
