"""Whether a sandbox finds an agent's command: on the owner's PATH, and not under the
home, /tmp or /run, which the sandbox has private."""

from __future__ import annotations

from pathlib import Path

from sandbridge.agents.command_lookup import look_up
from sandbridge.agents.profile import AgentProfile


def _program(directory: Path, name: str = "agent") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def _profile(command: str = "agent") -> AgentProfile:
    return AgentProfile("x", Path("/x.toml"), (command,))


def test_a_command_outside_the_private_places_is_found_inside() -> None:
    lookup = look_up(_profile("sh"), "/usr/bin:/bin", Path("/nonexistent-home"))
    assert lookup.found_inside
    assert lookup.path is not None and lookup.path.name == "sh"


def test_a_command_in_the_owners_home_is_not_found_inside(tmp_path: Path) -> None:
    home = tmp_path / "home"
    program = _program(home / ".local" / "bin")
    lookup = look_up(_profile(), str(program.parent), home)
    assert lookup.path == program
    assert not lookup.found_inside
    assert lookup.hidden_because is not None and f"under {home}, " in lookup.hidden_because


def test_a_missing_command_is_not_found() -> None:
    lookup = look_up(_profile("no-such-agent-x1"), "/usr/bin", None)
    assert lookup.path is None
    assert not lookup.found_inside
