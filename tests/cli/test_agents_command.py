"""The agent parts of the command line that start no sandbox: ``sandbridge agents``,
``run --agent``'s ``--print-policy`` and ``--dry-run``, its refusals, ``doctor``'s profile
checks and the shells' completions. Each runs as a user of its own (HOME, XDG dirs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.command_in_process import sandbridge

SECRET = "stand-in-key-never-printed-7f2a"


@pytest.fixture
def user(tmp_path: Path) -> dict[str, str]:
    """The environment of a user of the test's own, with a stand-in agent's profile."""
    home = tmp_path / "home"
    (home / "run").mkdir(parents=True, mode=0o700)
    agents = tmp_path / "config" / "sandbridge" / "agents"
    agents.mkdir(parents=True)
    (tmp_path / "config" / "sandbridge").chmod(0o700)
    (agents / "stand-in.toml").write_text(
        'description = "a stand-in agent"\n'
        'command = ["stand-in-agent", "--fast"]\n'
        'hosts = ["api.stand-in.test", "*.cdn.stand-in.test:8443"]\n'
        'state_dirs = [".stand-in"]\n'
        'credentials = ["STAND_IN_KEY", "STAND_IN_UNSET"]\n'
        'instructions = ".stand-in/NOTES.md"\n'
    )
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_RUNTIME_DIR": str(home / "run"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "STAND_IN_KEY": SECRET,
        "PROJECT": str(project),
    }
    env.pop("STAND_IN_UNSET", None)
    return env


def _sandbridge(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The command in this process (tests/support/command_in_process.py): these tests are
    about what it prints and refuses, not about its process."""
    return sandbridge(*args, env=env, cwd=env["PROJECT"])


def test_agents_lists_every_profile_with_its_command_and_state(user: dict[str, str]) -> None:
    result = _sandbridge(user, "agents")
    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.splitlines() if not line.startswith(" ")]
    assert names == ["aider", "claude", "codex", "gemini", "opencode", "shell", "stand-in"]
    assert "stand-in-agent: not found on PATH" in result.stdout
    assert f"{user['XDG_STATE_HOME']}/sandbridge/agents/stand-in/project-" in result.stdout


def test_agents_json_says_where_the_command_is_and_whether_the_sandbox_sees_it(
    user: dict[str, str], tmp_path: Path
) -> None:
    in_home = Path(user["HOME"]) / "bin"
    in_home.mkdir()
    (in_home / "stand-in-agent").write_text("#!/bin/sh\n")
    (in_home / "stand-in-agent").chmod(0o755)
    env = {**user, "PATH": f"{in_home}:{user['PATH']}"}
    rows = {row["name"]: row for row in json.loads(_sandbridge(env, "agents", "--json").stdout)}
    stand_in = rows["stand-in"]
    assert stand_in["found"] == str(in_home / "stand-in-agent")
    assert stand_in["found_inside"] is False
    assert stand_in["hosts"] == ["api.stand-in.test", "*.cdn.stand-in.test:8443"]
    assert stand_in["state_exists"] is False
    assert rows["shell"]["found_inside"] is True


def test_print_policy_lists_the_profile_hosts_with_the_profile_as_source(
    user: dict[str, str], tmp_path: Path
) -> None:
    result = _sandbridge(user, "run", "--agent", "stand-in", "--print-policy")
    assert result.returncode == 0, result.stderr
    source = f"(agent profile stand-in ({tmp_path}/config/sandbridge/agents/stand-in.toml))"
    lines = result.stdout.splitlines()
    assert any("api.stand-in.test  ports 80,443,8443" in ln and source in ln for ln in lines)
    assert any("*.cdn.stand-in.test:8443  ports 8443" in ln and source in ln for ln in lines)
    assert SECRET not in result.stdout + result.stderr
    agent = lines[
        lines.index(f"agent stand-in ({tmp_path}/config/sandbridge/agents/stand-in.toml)") :
    ]
    assert agent[1] == "  command      stand-in-agent --fast"
    assert agent[2].startswith(f"  state        ~/.stand-in: kept in {tmp_path}/state/")
    assert agent[3] == "  credentials  STAND_IN_KEY=<set>, STAND_IN_UNSET=<unset>"


def test_dry_run_runs_the_profile_command_with_the_args_and_hides_credentials(
    user: dict[str, str],
) -> None:
    result = _sandbridge(
        user, "run", "--agent", "stand-in", "--lockdown", "--dry-run", "--", "--resume"
    )
    assert result.returncode == 0, result.stderr
    assert "-- stand-in-agent --fast --resume" in result.stdout
    assert "--setenv STAND_IN_KEY '***'" in result.stdout
    assert SECRET not in result.stdout + result.stderr
    assert "credentials passed: STAND_IN_KEY; not set here: STAND_IN_UNSET" in result.stderr
    # The dry run's lockdown home is gone again.
    agents = Path(user["XDG_STATE_HOME"]) / "sandbridge" / "agents" / "stand-in"
    assert [p.name for p in agents.iterdir()] == []


def test_an_unknown_agent_is_refused_with_the_known_ones(user: dict[str, str]) -> None:
    result = _sandbridge(user, "run", "--agent", "nope")
    assert result.returncode == 2
    assert "--agent 'nope': no such profile (known: aider, claude, codex" in result.stderr
    assert "stand-in)" in result.stderr


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--lockdown", "--", "true"), "--lockdown needs --agent NAME"),
        (("--credential", "X", "--", "true"), "--credential needs --agent NAME"),
        (("--agent-home", "host", "--", "true"), "--agent-home host needs --agent NAME"),
        (
            ("--agent", "stand-in", "--lockdown", "--agent-home", "host"),
            "--lockdown and --agent-home host: choose one",
        ),
        (("--agent", "stand-in", "--credential", "A=B"), "--credential 'A=B': not a variable"),
    ],
)
def test_agent_options_out_of_place_are_refused(
    user: dict[str, str], options: tuple[str, ...], message: str
) -> None:
    result = _sandbridge(user, "run", "--dry-run", *options)
    assert result.returncode == 2
    assert message in result.stderr


def test_a_malformed_user_profile_is_refused_naming_file_and_key(
    user: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "config" / "sandbridge" / "agents" / "stand-in.toml"
    path.write_text('command = ["x"]\nstate_dirs = ["../.ssh"]\n')
    result = _sandbridge(user, "run", "--agent", "stand-in", "--dry-run")
    assert result.returncode == 2
    assert f"{path}:state_dirs: '../.ssh' must be a normalised path" in result.stderr


def test_doctor_checks_each_profile(user: dict[str, str]) -> None:
    result = _sandbridge(user, "doctor", "--json")
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["agent shell"]["status"] == "ok"
    assert checks["agent stand-in"]["found"].startswith("not installed (stand-in-agent")
    in_home = Path(user["HOME"]) / "bin"
    in_home.mkdir()
    (in_home / "stand-in-agent").write_text("#!/bin/sh\n")
    (in_home / "stand-in-agent").chmod(0o755)
    env = {**user, "PATH": f"{in_home}:{user['PATH']}"}
    checks = {
        c["name"]: c for c in json.loads(_sandbridge(env, "doctor", "--json").stdout)["checks"]
    }
    assert checks["agent stand-in"]["status"] == "warn"
    assert "runs here but not in a sandbox" in checks["agent stand-in"]["found"]
    assert "install stand-in-agent outside your home" in checks["agent stand-in"]["fix"]


def test_doctor_warns_of_a_state_dir_others_can_open(user: dict[str, str]) -> None:
    state = Path(user["XDG_STATE_HOME"]) / "sandbridge" / "agents" / "shell"
    state.mkdir(parents=True)
    state.chmod(0o755)
    checks = {
        c["name"]: c for c in json.loads(_sandbridge(user, "doctor", "--json").stdout)["checks"]
    }
    assert checks["agent shell"]["status"] == "warn"
    assert checks["agent shell"]["fix"] == f"chmod 700 {state} if it is yours, else remove it"


# Each shell's own syntax check: bash -n, zsh -n, fish --no-execute.
SYNTAX_CHECK = {"bash": ["bash", "-n"], "zsh": ["zsh", "-n"], "fish": ["fish", "--no-execute"]}


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completions_cover_the_commands_and_the_shell_accepts_them(
    user: dict[str, str], shell: str, tmp_path: Path
) -> None:
    result = _sandbridge(user, "completions", shell)
    assert result.returncode == 0, result.stderr
    # (fish names a long option without its dashes)
    for word in ("run", "agents", "doctor", "completions", "agent-home", "lockdown"):
        assert word in result.stdout, word
    assert shutil.which(shell), f"{shell} is not installed: ./dev.sh setup installs it"
    script = tmp_path / f"completion.{shell}"
    script.write_text(result.stdout)
    check = subprocess.run(
        [*SYNTAX_CHECK[shell], str(script)], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stderr
