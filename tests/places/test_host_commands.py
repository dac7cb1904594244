"""The host's own commands are never taken from a place the sandbox can write."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.exceptions import SandboxError
from sandbridge.places import host_commands


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test distrusts its own directories only."""
    monkeypatch.setattr(host_commands, "_distrusted", set())
    yield


def command(directory: Path, name: str = "tool") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_a_command_in_the_workdir_on_path_is_passed_over_for_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workdir = tmp_path / "proj"
    command(workdir / ".venv" / "bin")  # an activated virtualenv, which the sandbox writes
    system = command(tmp_path / "usr" / "bin")
    monkeypatch.setenv("PATH", f"{workdir / '.venv' / 'bin'}:{system.parent}")
    assert host_commands.which("tool") == str(workdir / ".venv" / "bin" / "tool")
    host_commands.distrust([workdir])
    assert host_commands.which("tool") == str(system)


def test_relative_and_empty_path_entries_are_never_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    command(tmp_path / "bin")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", ":.:bin:")
    assert host_commands.search_path() == []
    assert host_commands.which("tool") is None


def test_a_path_entry_or_a_command_that_links_into_the_workdir_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workdir = tmp_path / "proj"
    planted = command(workdir / "bin")
    linked_dir = tmp_path / "linked-bin"
    linked_dir.symlink_to(workdir / "bin")
    other = tmp_path / "other-bin"
    other.mkdir()
    (other / "tool").symlink_to(planted)
    monkeypatch.setenv("PATH", f"{linked_dir}:{other}")
    host_commands.distrust([workdir])
    assert host_commands.which("tool") is None
    with pytest.raises(SandboxError) as caught:
        host_commands.require("tool")
    assert str(caught.value).startswith("tool: not found on PATH outside the places")


def test_a_missing_directory_on_path_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    system = command(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'gone'}{os.pathsep}{system.parent}")
    host_commands.distrust([tmp_path / "proj"])
    assert host_commands.which("tool") == str(system)
