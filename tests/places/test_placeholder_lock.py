"""The placeholders' lock (places/placeholder_lock.py): one holder at a time, in the
state dir; without a usable state dir, no lock (and no wait)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from sandbridge.places import placeholder_lock
from sandbridge.places.known_projects import state_dir


def is_free() -> bool:
    """Whether another holder could take it now (asked without waiting)."""
    fd = os.open(state_dir() / placeholder_lock.LOCK, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_it_is_held_for_the_block_and_free_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    with placeholder_lock.held() as held:
        assert held
        assert not is_free()
        assert (state_dir().stat().st_mode & 0o777) == 0o700
    assert is_free()


def test_without_a_usable_state_dir_the_block_runs_unlocked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "file"))
    with placeholder_lock.held() as held:
        assert not held
