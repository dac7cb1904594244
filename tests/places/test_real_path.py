"""places/real_path.py: the kernel's answer is ``os.path.realpath``'s, on real links."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbridge.places.real_path import real_path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A directory reached through a link to a parent, a link to a link, a relative
    link, and a dangling one."""
    (tmp_path / "real" / "deep").mkdir(parents=True)
    (tmp_path / "up").symlink_to(tmp_path / "real")
    (tmp_path / "up2").symlink_to("up")
    (tmp_path / "real" / "deep" / "back").symlink_to("../..")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    return tmp_path


@pytest.mark.parametrize(
    "relative",
    [
        "real/deep",
        "up/deep",
        "up2/deep",
        "up2/deep/back/up/deep",
        "up/deep/..",
        "dangling",
        "nowhere/at/all",
        "up/missing",
        "real/deep/back/real",
    ],
)
def test_real_path_is_what_realpath_says(tree: Path, relative: str) -> None:
    path = tree / relative
    assert real_path(path) == os.path.realpath(path)


def test_a_relative_path_is_made_absolute_from_the_working_directory(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree / "up")
    assert real_path("deep") == os.path.realpath("deep") == str(tree / "real" / "deep")
