"""Agent profiles: every shipped one is valid, and a hostile or malformed profile is
refused with its ``file:key`` and the offending value, never half-applied."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from sandbridge.agents import catalogue
from sandbridge.agents.profile import AgentProfile, parse_profile
from sandbridge.exceptions import AgentError

REQUIRED = {"claude", "codex", "gemini", "opencode", "aider", "shell"}
SOURCE = Path("/owner/.config/sandbridge/agents/x.toml")


def test_every_shipped_profile_loads_and_the_required_agents_are_there() -> None:
    shipped = {path.stem for path in catalogue.SHIPPED_DIR.glob("*.toml")}
    assert shipped >= REQUIRED
    for name in shipped:
        profile = catalogue.load_file(catalogue.SHIPPED_DIR / f"{name}.toml")
        assert profile.name == name
        assert profile.command


def test_each_instruction_file_lies_in_the_agents_own_state() -> None:
    for name in REQUIRED:
        profile = catalogue.load_file(catalogue.SHIPPED_DIR / f"{name}.toml")
        if profile.instructions is not None:
            assert any(profile.instructions.is_relative_to(d) for d in profile.state_dirs)


def test_claude_keeps_its_directory_and_its_json_file() -> None:
    claude = catalogue.load_file(catalogue.SHIPPED_DIR / "claude.toml")
    assert claude.state_dirs == (PurePosixPath(".claude"),)
    assert claude.state_files == (PurePosixPath(".claude.json"),)
    assert claude.instructions == PurePosixPath(".claude/CLAUDE.md")
    assert "api.anthropic.com" in claude.hosts
    assert claude.policy_source == f"agent profile claude ({claude.source})"


GOOD: dict[str, Any] = {"command": ["agent"], "state_dirs": [".agent"]}

# (field values that replace GOOD's, the key the refusal names, a piece of its text)
HOSTILE = [
    ({"command": []}, "command", "must name a program"),
    ({"command": "agent"}, "command", "must be a list"),
    ({"command": [""]}, "command", "must name a program"),
    ({"command": ["a\nb"]}, "command", "control character"),
    ({"hosts": ["gate:5432"]}, "hosts", "host service"),
    ({"hosts": ["db.internal private"]}, "hosts", "private"),
    ({"hosts": ["bad host!"]}, "hosts", "bad host!"),
    ({"hosts": ["x.test"] * 65}, "hosts", "at most 64"),
    ({"state_dirs": ["/etc"]}, "state_dirs", "'/etc'"),
    ({"state_dirs": ["../.ssh"]}, "state_dirs", "'../.ssh'"),
    ({"state_dirs": [".a/../.ssh"]}, "state_dirs", "'.a/../.ssh'"),
    ({"state_dirs": ["."]}, "state_dirs", "'.'"),
    ({"state_dirs": [""]}, "state_dirs", "''"),
    ({"state_dirs": [".a", ".a/b"]}, "state_dirs", "lies inside"),
    ({"state_files": [".a//b"]}, "state_files", "'.a//b'"),
    ({"credentials": ["PATH"]}, "credentials", "'PATH'"),
    ({"credentials": ["LD_PRELOAD"]}, "credentials", "'LD_PRELOAD'"),
    ({"credentials": ["https_proxy"]}, "credentials", "'https_proxy'"),
    ({"credentials": ["AGS_WEBVIEW_RELAY_SOCKET"]}, "credentials", "set by sandbridge"),
    ({"credentials": ["A-B"]}, "credentials", "'A-B'"),
    ({"instructions": ".bashrc"}, "instructions", "inside one of state_dirs"),
    ({"instructions": ".agent"}, "instructions", "inside one of state_dirs"),
    ({"instructions": 3}, "instructions", "must be a path string"),
    ({"description": "x" * 201}, "description", "one short line"),
    ({"environment": {}}, "environment", "unknown key"),
]


@pytest.mark.parametrize(("change", "key", "text"), HOSTILE, ids=lambda v: str(v)[:40])
def test_a_bad_field_is_refused_naming_file_and_key(
    change: dict[str, Any], key: str, text: str
) -> None:
    with pytest.raises(AgentError) as caught:
        parse_profile("x", SOURCE, {**GOOD, **change})
    message = str(caught.value)
    assert message.startswith(f"{SOURCE}:{key}: ")
    assert text in message
    assert "\n" not in message


@pytest.mark.parametrize("name", ["", "A", "-x", "x/y", "x" * 33, "x.y"])
def test_a_bad_profile_name_is_refused(name: str) -> None:
    with pytest.raises(AgentError, match="profile name"):
        parse_profile(name, SOURCE, GOOD)


def test_a_minimal_profile_is_a_command_alone() -> None:
    profile = parse_profile("x", SOURCE, {"command": ["agent", "--flag"]})
    assert profile == AgentProfile("x", SOURCE, ("agent", "--flag"))


def _user_profile(config: Path, name: str, text: str) -> Path:
    directory = config / "sandbridge" / "agents"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


def test_the_owners_profile_replaces_a_shipped_one_and_adds_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    own = _user_profile(tmp_path, "claude", 'command = ["my-claude"]\n')
    _user_profile(tmp_path, "mine", 'command = ["mine"]\n')
    profiles = catalogue.load_all()
    assert profiles["claude"].command == ("my-claude",)
    assert profiles["claude"].source == own
    assert profiles["mine"].command == ("mine",)
    assert profiles["codex"].source.parent == catalogue.SHIPPED_DIR


def test_an_unknown_agent_is_refused_with_the_known_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    with pytest.raises(AgentError) as caught:
        catalogue.find("nope")
    assert "--agent 'nope': no such profile (known: aider, claude, codex" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "piece"),
    [
        ("command = [", "not TOML"),
        ('command = ["a"]\nhosts = "x"\n', ":hosts: must be a list"),
        (b"\xff".decode("latin-1"), "not UTF-8"),
    ],
)
def test_a_malformed_user_file_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, piece: str
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path = _user_profile(tmp_path, "bad", "")
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(AgentError) as caught:
        catalogue.find("bad")
    assert str(caught.value).startswith(str(path))
    assert piece in str(caught.value)


def test_a_fifo_or_a_huge_file_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    directory = _user_profile(tmp_path, "big", "#" * (catalogue.MAX_PROFILE_BYTES + 1)).parent
    with pytest.raises(AgentError, match="larger than"):
        catalogue.find("big")
    import os

    os.mkfifo(directory / "fifo.toml")
    with pytest.raises(AgentError, match="not a regular file"):
        catalogue.find("fifo")
