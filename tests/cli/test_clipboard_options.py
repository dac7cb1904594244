"""``--clipboard`` on the command line, as a real process: listed by ``--print-policy``,
refused (one line, no session made) where it cannot be served, and never turned on by
the project's own ``.sandbridge/``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sandbridge.places.registry import list_sessions
from tests.conftest import SANDBRIDGE
from tests.support import command_in_process


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
        "clipboard: off (--clipboard read|readwrite, or clipboard = ... in your config, "
        "turns it on)" in shown.stdout
    )


def test_the_owners_config_turns_it_on_naming_its_line(tmp_path: Path, xdg: Path) -> None:
    config = tmp_path / "config" / "sandbridge" / "config"
    config.parent.mkdir(parents=True)
    config.write_text("clipboard = readwrite\n")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    shown = sandbridge(tmp_path, env, "run", "--print-policy", "--", "true")
    assert (
        f"clipboard: readwrite at /run/ags-webview-relay/clipboard.sock ({config}:1): "
    ) in shown.stdout
    assert "writes allowed" in shown.stdout
    config.write_text("clipboard = everything\n")
    refused = sandbridge(tmp_path, env, "run", "--print-policy", "--", "true")
    assert refused.returncode == 2
    assert f"{config}:1 'everything': not a clipboard mode; use read or readwrite" in (
        refused.stderr
    )


def test_print_policy_lists_the_mode_window_and_writes(tmp_path: Path, xdg: Path) -> None:
    shown = sandbridge(
        tmp_path, dict(os.environ), "run", "--print-policy",
        "--clipboard", "read", "--clipboard-window", "30", "--", "true",
    )  # fmt: skip
    assert (
        "clipboard: read at /run/ags-webview-relay/clipboard.sock (--clipboard): reads after "
        "the owner's yes, for 30 s each; writes refused; text and PNG only; each transfer "
        "logged"
    ) in shown.stdout
    preapproved = sandbridge(
        tmp_path, dict(os.environ), "run", "--print-policy",
        "--clipboard", "readwrite", "--clipboard-preapprove", "--", "true",
    )  # fmt: skip
    assert "every read allowed without asking (--clipboard-preapprove); writes allowed" in (
        preapproved.stdout
    )


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        (("--clipboard", "write"), "sandbridge: --clipboard 'write': not a clipboard mode"),
        (
            ("--clipboard", "read", "--clipboard-window", "0"),
            "sandbridge: --clipboard-window '0': not a number of seconds",
        ),
        (
            ("--clipboard-preapprove",),
            "sandbridge: --clipboard-window and --clipboard-preapprove need --clipboard",
        ),
    ],
)
def test_a_malformed_flag_is_refused_in_one_line_before_any_session(
    tmp_path: Path, xdg: Path, options: tuple[str, ...], refusal: str
) -> None:
    result = sandbridge(tmp_path, dict(os.environ), "run", "--no-daemon", *options, "--", "true")
    assert result.returncode == 2
    assert result.stderr.startswith(refusal)
    assert len(result.stderr.splitlines()) == 1
    assert list_sessions() == []


def test_a_host_without_a_display_is_refused_at_session_start(tmp_path: Path, xdg: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    result = started(tmp_path, env, "run", "--no-daemon", "--clipboard", "read", "--", "true")
    assert result.returncode != 0
    assert "sandbridge: --clipboard: neither WAYLAND_DISPLAY nor DISPLAY is set here" in (
        result.stderr
    )


def test_the_projects_config_cannot_turn_it_on(tmp_path: Path, xdg: Path) -> None:
    (tmp_path / ".sandbridge").mkdir()
    (tmp_path / ".sandbridge" / "config").write_text("clipboard = readwrite\n")
    result = sandbridge(tmp_path, dict(os.environ), "run", "--print-policy", "--", "true")
    assert result.returncode == 2
    assert (
        "sandbridge: .sandbridge/config:1: clipboard (the clipboard bridge's mode "
        "(docs/clipboard.md)) belongs in the owner's own config" in result.stderr
    )
