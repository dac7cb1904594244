"""``--containers`` on the command line, as a real process: listed by ``--print-policy``,
refused (one line, no session made) where it cannot be served, turned on by the owner's
config and never by the project's own ``.sandbridge/``."""

from __future__ import annotations

import os
import socket
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
    assert "containers: off (--containers --containers-image NAME, or containers = on" in (
        shown.stdout
    )


def test_print_policy_lists_engine_images_network_and_keep(tmp_path: Path, xdg: Path) -> None:
    engine = tmp_path / "engine.sock"
    engine.touch()
    shown = sandbridge(
        tmp_path, dict(os.environ), "run", "--print-policy", "--containers",
        "--containers-engine", f"unix://{engine}", "--containers-image", "busybox",
        "--containers-image", "localhost/sbtest/busybox:1", "--containers-keep", "--", "true",
    )  # fmt: skip
    assert (
        f"containers: on at /run/ags-webview-relay/containers.sock (--containers): engine "
        f"{engine}; images busybox:latest, localhost/sbtest/busybox:1; network none; "
        "containers kept when the session ends; each request logged"
    ) in shown.stdout, shown.stderr


def test_the_owners_config_turns_it_on_naming_its_line(tmp_path: Path, xdg: Path) -> None:
    engine = tmp_path / "engine.sock"
    engine.touch()
    config = tmp_path / "config" / "sandbridge" / "config"
    config.parent.mkdir(parents=True)
    config.write_text(
        f"containers = on\ncontainers_image = busybox:1.36\ncontainers_engine = unix://{engine}\n"
        "containers_network = engine\n"
    )
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    shown = sandbridge(tmp_path, env, "run", "--print-policy", "--", "true")
    assert f"containers: on at /run/ags-webview-relay/containers.sock ({config}:1)" in (
        shown.stdout
    ), shown.stderr
    assert "images busybox:1.36; network engine; containers removed when" in shown.stdout
    config.write_text("containers = on\ncontainers_image = *\n")
    refused = sandbridge(tmp_path, env, "run", "--print-policy", "--", "true")
    assert refused.returncode == 2
    assert f"{config}:2 '*': every image is never allowed" in refused.stderr


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        (("--containers-image", "busybox"), "sandbridge: --containers-image, --containers-engine"),
        (("--containers", "--containers-engine", "unix:///x"),
         "sandbridge: --containers: no image listed; name each image"),
        (("--containers", "--containers-image", "BusyBox"),
         "sandbridge: --containers-image 'BusyBox': not an image reference"),
        (("--containers", "--containers-image", "a", "--containers-engine", "tcp://h:2375"),
         "sandbridge: --containers-engine 'tcp://h:2375': not a unix:///PATH address"),
        (("--containers", "--containers-image", "a", "--containers-engine", "unix:///x",
          "--containers-network", "host"),
         "sandbridge: --containers-network 'host': not a containers network"),
    ],
)  # fmt: skip
def test_a_malformed_flag_is_refused_in_one_line_before_any_session(
    tmp_path: Path, xdg: Path, options: tuple[str, ...], refusal: str
) -> None:
    result = sandbridge(tmp_path, dict(os.environ), "run", "--no-daemon", *options, "--", "true")
    assert result.returncode == 2
    assert result.stderr.startswith(refusal), result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert list_sessions() == []


def test_an_engine_that_does_not_answer_is_refused_at_session_start(
    tmp_path: Path, xdg: Path
) -> None:
    work = tmp_path / "work"  # the engine's socket path lies outside it
    work.mkdir()
    result = started(
        work, dict(os.environ), "run", "--no-daemon", "--net", "none", "--containers",
        "--containers-image", "busybox", "--containers-engine", f"unix://{tmp_path}/gone.sock",
        "--", "true",
    )  # fmt: skip
    assert result.returncode != 0
    assert f"sandbridge: --containers: the engine at {tmp_path}/gone.sock does not answer" in (
        result.stderr
    )
    assert list_sessions() == []


def test_the_projects_config_cannot_turn_it_on(tmp_path: Path, xdg: Path) -> None:
    (tmp_path / ".sandbridge").mkdir()
    for line in ("containers = on", "containers_image = busybox"):
        (tmp_path / ".sandbridge" / "config").write_text(line + "\n")
        result = sandbridge(tmp_path, dict(os.environ), "run", "--print-policy", "--", "true")
        assert result.returncode == 2
        assert "belongs in the owner's own config" in result.stderr
        assert "(docs/containers.md)" in result.stderr


def test_an_engine_socket_the_sandbox_sees_is_refused_at_session_start(
    tmp_path: Path, xdg: Path
) -> None:
    engine = tmp_path / "engine.sock"
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(engine))
    listening.listen()
    try:
        result = started(
            tmp_path, dict(os.environ), "run", "--no-daemon", "--net", "none", "--containers",
            "--containers-image", "busybox", "--containers-engine", f"unix://{engine}",
            "--", "true",
        )  # fmt: skip
    finally:
        listening.close()
    assert result.returncode != 0
    assert (
        f"sandbridge: --containers: the engine's socket {engine} lies in {tmp_path}, which the "
        "sandbox sees: it would reach the engine around the bridge"
    ) in result.stderr
    assert list_sessions() == []
