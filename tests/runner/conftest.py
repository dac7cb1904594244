"""Fixtures of the runner tests: each backend, and a private runtime base per test."""

from __future__ import annotations

from pathlib import Path

import pytest

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
