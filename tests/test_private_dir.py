"""Directories only this user may use (``private_dir.py``): a directory others can open is
refused, and ``chmod 700`` is advised only where running it harms nothing else."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbridge.exceptions import SandbridgeError
from sandbridge.private_dir import is_system_dir, require_private_dir


def test_a_directory_of_ones_own_open_to_others_gets_the_chmod_to_run(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    mine.chmod(0o755)
    with pytest.raises(SandbridgeError) as refused:
        require_private_dir(mine, "runtime dir", SandbridgeError)
    assert str(refused.value) == f"runtime dir {mine} has mode 755; run chmod 700 on it"


@pytest.mark.parametrize(
    "path", ["/", "/etc", "/usr", "/tmp", "/var", "/run", "/usr/lib", "/var/tmp"]
)
def test_a_system_directory_is_never_advised_a_chmod(path: str) -> None:
    info = os.stat(path)
    assert is_system_dir(Path(path), info.st_mode)
    with pytest.raises(SandbridgeError) as refused:
        require_private_dir(Path(path), "runtime dir", SandbridgeError, "choose another")
    said = str(refused.value)
    assert "run chmod" not in said
    if info.st_uid == os.getuid():  # root: the mode is what is wrong
        assert said == (
            f"runtime dir {path} has mode {info.st_mode & 0o7777:o} and is a system directory, "
            "which others must keep using (never chmod it); choose another"
        )


def test_a_sticky_directory_anyone_writes_is_a_shared_one(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    assert is_system_dir(shared, os.stat(shared).st_mode)
    assert not is_system_dir(tmp_path, os.stat(tmp_path).st_mode)


def test_a_link_to_a_system_directory_is_one_too(tmp_path: Path) -> None:
    (tmp_path / "etc").symlink_to("/etc")
    assert is_system_dir(tmp_path / "etc", os.stat("/etc").st_mode)
