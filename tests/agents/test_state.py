"""An agent's state on the host: kept per agent and project (0700 dirs, 0600 files), a
lockdown's removed at the end, the owner's real one bound only when asked, and the hints
file never written through a link the sandbox planted."""

from __future__ import annotations

import stat
from pathlib import Path, PurePosixPath

import pytest

from sandbridge.agents.hints import hints
from sandbridge.agents.home import AgentHome
from sandbridge.agents.profile import AgentProfile
from sandbridge.agents.state import (
    agents_root,
    kept_dir,
    prepare,
    project_id,
    write_hints,
)
from sandbridge.exceptions import AgentError

INSIDE = Path("/home/owner")


@pytest.fixture
def profile() -> AgentProfile:
    return AgentProfile(
        "stand-in",
        Path("/x.toml"),
        ("agent",),
        state_dirs=(PurePosixPath(".agent"), PurePosixPath(".config/agent")),
        state_files=(PurePosixPath(".agent.json"),),
        instructions=PurePosixPath(".agent/NOTES.md"),
    )


@pytest.fixture(autouse=True)
def own_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_kept_state_is_a_private_home_of_its_own_with_the_state_paths_made(
    profile: AgentProfile, tmp_path: Path
) -> None:
    state = prepare(profile, AgentHome.KEPT, tmp_path / "proj", INSIDE, None)
    base = kept_dir(profile, tmp_path / "proj")
    assert state.directory == base  # bound as the sandbox's home
    assert state.mounts == ()  # no path bound on its own: rename(2) works in it
    assert base.is_relative_to(agents_root() / "stand-in")
    assert _mode(base / ".agent") == 0o700
    assert _mode(base / ".config") == 0o700
    assert _mode(base / ".agent.json") == 0o600
    assert (base / ".agent.json").is_file()
    for step in (agents_root().parent, agents_root(), base):
        assert _mode(step) == 0o700
    state.finish()
    assert base.is_dir()  # kept


def test_two_projects_of_the_same_name_keep_apart(tmp_path: Path) -> None:
    assert project_id(tmp_path / "a" / "app") != project_id(tmp_path / "b" / "app")
    assert project_id(tmp_path / "a" / "app").startswith("app-")


def test_lockdown_state_is_fresh_and_gone_at_the_end(profile: AgentProfile, tmp_path: Path) -> None:
    kept = prepare(profile, AgentHome.KEPT, tmp_path / "proj", INSIDE, None)
    assert kept.directory is not None
    (kept.directory / ".agent" / "login").write_text("token")
    state = prepare(profile, AgentHome.LOCKDOWN, tmp_path / "proj", INSIDE, None)
    assert state.directory is not None and state.directory != kept.directory
    assert list((state.directory / ".agent").iterdir()) == []
    state.finish()
    assert not state.directory.exists()
    assert (kept.directory / ".agent" / "login").read_text() == "token"


def test_host_home_binds_the_owners_real_paths(profile: AgentProfile, tmp_path: Path) -> None:
    owner = tmp_path / "owner"
    (owner / ".agent").mkdir(parents=True)
    (owner / ".agent" / "login").write_text("real")
    state = prepare(profile, AgentHome.HOST, tmp_path / "proj", INSIDE, owner)
    assert state.directory is None
    assert (owner / ".agent", INSIDE / ".agent", True) in {
        (m.source, m.dest, m.writable) for m in state.mounts
    }
    assert (owner / ".agent.json").is_file()  # made, as the agent would make it
    assert not agents_root().exists()


def test_host_home_needs_a_home(profile: AgentProfile, tmp_path: Path) -> None:
    with pytest.raises(AgentError, match="HOME is not set"):
        prepare(profile, AgentHome.HOST, tmp_path / "proj", INSIDE, None)


def test_a_state_path_the_sandbox_made_a_link_is_refused(
    profile: AgentProfile, tmp_path: Path
) -> None:
    base = kept_dir(profile, tmp_path / "proj")
    prepare(profile, AgentHome.KEPT, tmp_path / "proj", INSIDE, None)
    (base / ".agent.json").unlink()
    (base / ".agent.json").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(AgentError, match=r"\.agent\.json: not a regular file"):
        prepare(profile, AgentHome.KEPT, tmp_path / "proj", INSIDE, None)
    assert not (tmp_path / "elsewhere").exists()


def test_hints_are_never_written_through_a_link(profile: AgentProfile, tmp_path: Path) -> None:
    state = prepare(profile, AgentHome.KEPT, tmp_path / "proj", INSIDE, None)
    assert state.directory is not None
    victim = tmp_path / "owners-bashrc"
    victim.write_text("mine\n")
    (state.directory / ".agent" / "NOTES.md").symlink_to(victim)
    with pytest.raises(AgentError, match="a link; remove it"):
        write_hints(state.directory, PurePosixPath(".agent/NOTES.md"), hints(None, ()))
    assert victim.read_text() == "mine\n"


def test_hints_are_never_written_through_a_linked_directory(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / ".agent").mkdir(parents=True)
    (tmp_path / "victim").mkdir()
    (base / ".agent" / "sub").symlink_to(tmp_path / "victim")
    with pytest.raises(AgentError, match="sub is a link"):
        write_hints(base, PurePosixPath(".agent/sub/NOTES.md"), hints(None, ()))
    assert list((tmp_path / "victim").iterdir()) == []


def test_hints_file_keeps_the_agents_own_text(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / ".agent").mkdir(parents=True)
    notes = base / ".agent" / "NOTES.md"
    notes.write_text("# my rules\n")
    write_hints(base, PurePosixPath(".agent/NOTES.md"), hints("100.64.0.1", ()))
    write_hints(base, PurePosixPath(".agent/NOTES.md"), hints("100.64.0.1", (5432,)))
    text = notes.read_text()
    assert text.startswith("# my rules\n")
    assert text.count("sandbridge: begin") == 1
    assert "100.64.0.1:5432" in text


def test_a_new_hints_file_is_private(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    written = write_hints(base, PurePosixPath(".agent/NOTES.md"), hints(None, ()))
    assert _mode(written) == 0o600
    assert _mode(base / ".agent") == 0o700
