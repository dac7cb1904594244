"""``--ssh-agent`` on the command line, as a real process: listed by ``--print-policy``,
refused (one line, status 2, no session made) where it cannot be served, and never
turned on by the project's own ``.sandbridge/``."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.places.registry import list_sessions
from tests.conftest import SANDBRIDGE
from tests.ssh_agent.owner_agent import OwnerAgent, start_owner_agent
from tests.support import command_in_process


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[OwnerAgent]:
    (tmp_path / "owner").mkdir()
    agent = start_owner_agent(tmp_path / "owner")
    yield agent
    agent.stop()


def sandbridge(workdir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The command in this process (tests/support/command_in_process.py): every run here is
    refused or only shows its policy."""
    return command_in_process.sandbridge(*args, env=env, cwd=workdir)


def started(workdir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """A real ``sandbridge run``: one refused at its session's start, in its process."""
    return subprocess.run(
        [*SANDBRIDGE, *args], cwd=workdir, env=env, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip


def test_print_policy_says_the_bridge_is_off_by_default(tmp_path: Path, xdg: Path) -> None:
    shown = sandbridge(tmp_path, dict(os.environ), "run", "--print-policy", "--", "true")
    assert (
        "ssh-agent: off (--ssh-agent KEY, or ssh_agent = KEY in your config, turns it on)"
        in shown.stdout
    )


def test_the_owners_config_turns_it_on_naming_its_line(
    tmp_path: Path, xdg: Path, owner: OwnerAgent
) -> None:
    config = tmp_path / "config" / "sandbridge" / "config"
    config.parent.mkdir(parents=True)
    config.write_text(f"# mine\nssh_agent = {owner.chosen.fingerprint}:session\n")
    env = {**owner.env(), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    shown = sandbridge(tmp_path, env, "run", "--print-policy", "--", "true")
    assert (
        f"ssh-agent: on at /run/ags-webview-relay/ssh-agent.sock ({config}:2): lists and "
        f"signs with {owner.chosen.fingerprint} (session);"
    ) in shown.stdout
    # The flag wins over the config.
    shown = sandbridge(
        tmp_path, env, "run", "--print-policy", "--ssh-agent", "deploy", "--", "true"
    )
    assert "(--ssh-agent): lists and signs with deploy (always);" in shown.stdout


def test_print_policy_lists_the_chosen_keys_with_their_modes(
    tmp_path: Path, xdg: Path, owner: OwnerAgent
) -> None:
    shown = sandbridge(
        tmp_path, owner.env(), "run", "--print-policy",
        "--ssh-agent", f"{owner.chosen.fingerprint}:each,deploy", "--", "true",
    )  # fmt: skip
    assert (
        "ssh-agent: on at /run/ags-webview-relay/ssh-agent.sock (--ssh-agent): lists and "
        f"signs with {owner.chosen.fingerprint} (each), deploy (always);"
    ) in shown.stdout


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("all", "sandbridge: --ssh-agent 'all': every key is never offered"),
        ("gone", "sandbridge: --ssh-agent gone: no key in the owner's agent"),
    ],
)
def test_a_choice_that_cannot_be_served_ends_the_run_before_its_sandbox(
    tmp_path: Path, xdg: Path, owner: OwnerAgent, value: str, says: str
) -> None:
    marker = tmp_path / "ran"
    result = started(
        tmp_path, owner.env(), "run", "--no-daemon", "--ssh-agent", value,
        "--", "touch", str(marker),
    )  # fmt: skip
    assert result.returncode == 2
    assert says in result.stderr
    assert not marker.exists()
    assert list_sessions() == []


def test_without_an_agent_on_the_host_the_flag_is_refused(tmp_path: Path, xdg: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    result = sandbridge(tmp_path, env, "run", "--ssh-agent", "deploy", "--", "true")
    assert result.returncode == 2
    assert result.stderr.startswith("sandbridge: --ssh-agent: SSH_AUTH_SOCK is not set here")


def test_the_projects_config_cannot_turn_it_on(
    tmp_path: Path, xdg: Path, owner: OwnerAgent
) -> None:
    (tmp_path / ".sandbridge").mkdir()
    (tmp_path / ".sandbridge" / "config").write_text(f"ssh_agent = {owner.chosen.fingerprint}\n")
    result = sandbridge(tmp_path, owner.env(), "run", "--print-policy", "--", "true")
    assert result.returncode == 2
    assert (
        "sandbridge: .sandbridge/config:1: ssh_agent (the ssh-agent bridge's keys "
        "(docs/ssh-agent.md)) belongs in the owner's own config" in result.stderr
    )
