"""The command line (``parser.build_parser``) and its sessions' commands (``sessions.py``):
every command and argument the owner can reach through ``--help`` says what it is."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.cli.parser import build_parser
from sandbridge.cli.sessions import _remove_placeholders
from sandbridge.sandbox.placeholder import Placeholder
from sandbridge.sandbox.protected_paths import Protection
from sandbridge.terminals.control import call
from tests.conftest import SANDBRIDGE, Process
from tests.places.test_placeholder_lock import is_free


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser of the tree, by the words that reach it (``("terminal", "approve")``)."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def test_every_command_has_a_description_and_every_positional_a_help() -> None:
    missing = []
    for path, parser in _commands(build_parser()):
        if parser.description is None:
            missing.append(f"sandbridge {' '.join(path)}: no description")
        for action in parser._actions:
            if (
                not action.option_strings
                and not isinstance(action, argparse._SubParsersAction)
                and not action.help
            ):
                missing.append(f"sandbridge {' '.join(path)} {action.dest}: no help")
    assert missing == []


def _group_of(words: list[str], flag: str) -> str | None:
    parser = build_parser()
    for path, sub in _commands(parser):
        if list(path) == words:
            for group in sub._action_groups:
                if any(flag in action.option_strings for action in group._group_actions):
                    return group.title
    raise AssertionError(f"no {flag} in sandbridge {' '.join(words)}")


def test_private_is_a_way_apps_are_served_not_a_relay_limit() -> None:
    for command in ("run", "host", "demo"):
        assert _group_of([command], "--private") == "how apps are served"
        assert _group_of([command], "--max-connections") == "relay limits"


def test_one_name_for_how_long_a_terminal_approval_lasts() -> None:
    for words in (
        ["terminal", "request", "web"],
        ["terminal", "approve", "web:1a"],
        ["shell", "web"],
    ):
        args = build_parser().parse_args([*words, "--duration", "5m"])
        assert args.duration == "5m"


def test_ttl_is_a_hidden_deprecated_alias_of_duration(capsys: pytest.CaptureFixture[str]) -> None:
    for words in (["terminal", "approve", "web:1a"], ["shell", "web"]):
        args = build_parser().parse_args([*words, "--ttl", "5m"])
        assert args.duration == "5m"
        assert capsys.readouterr().err == (
            "sandbridge: --ttl is deprecated: use --duration (same value)\n"
        )
        with pytest.raises(SystemExit):
            build_parser().parse_args([*words, "--help"])
        shown = capsys.readouterr().out
        assert "--duration" in shown and "--ttl" not in shown


def test_without_duration_approve_signs_for_the_duration_asked() -> None:
    assert build_parser().parse_args(["terminal", "approve", "web:1a"]).duration is None
    assert build_parser().parse_args(["shell", "web"]).duration == "10m"


def test_host_on_a_system_directory_says_to_choose_another_runtime_dir(tmp_path: Path) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "XDG_RUNTIME_DIR": str(runtime),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    result = subprocess.run(
        [*SANDBRIDGE, "host", "--runtime-dir", "/etc", "--no-daemon"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "chmod 700" not in result.stderr
    if os.stat("/etc").st_uid == os.getuid():  # root: its mode is what is refused
        assert result.stderr == (
            "sandbridge: runtime dir /etc has mode 755 and is a system directory, which others "
            "must keep using (never chmod it); give --runtime-dir a new directory of your own\n"
        )


def test_host_stopped_by_its_owner_says_so_on_its_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, container = tmp_path / "run", tmp_path / "container"
    runtime.mkdir(mode=0o700)
    for name, value in (
        ("HOME", tmp_path),
        ("XDG_RUNTIME_DIR", runtime),
        ("XDG_STATE_HOME", tmp_path / "state"),
        ("XDG_CONFIG_HOME", tmp_path / "config"),
    ):
        monkeypatch.setenv(name, str(value))
    host = Process(
        [*SANDBRIDGE, "host", "--runtime-dir", str(container), "--name", "web", "--no-daemon"]
    )
    try:
        host.wait_line("sandbridge: serving registrations", "stderr")
        assert call("web", {"op": "stop"}) == {"ok": True, "stopping": True}
        assert host.popen.wait(30) == 128 + signal.SIGTERM
        host.wait_line("sandbridge: session web was stopped by its owner", "stderr")
    finally:
        if host.popen.poll() is None:
            host.stop()


def test_a_builders_run_removes_its_placeholders_after_its_client_under_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The daemon's run builder answers its client, then closes ``after_exit``: the lock
    # is taken before the answer, so a run started once the client exits waits for the
    # removal before it makes its own placeholders.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    protection = Protection(placeholders=[Placeholder(tmp_path / ".vscode", None)])
    protection.create_placeholders()
    with contextlib.ExitStack() as after_exit:
        _remove_placeholders(protection, after_exit)
        assert (tmp_path / ".vscode").is_dir()
        assert not is_free()
    assert not (tmp_path / ".vscode").exists()
    assert is_free()
    # The full command's run removes them at once.
    protection.create_placeholders()
    _remove_placeholders(protection, None)
    assert not (tmp_path / ".vscode").exists()
    assert is_free()
