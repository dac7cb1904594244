"""sandbridge's own files inside the sandbox: the apps' settings (Jupyter's) and where
``run`` points Jupyter at them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sandbridge.sandbox.commands import (
    APP_SETTINGS_DIR,
    JUPYTER_SETTINGS_FILE,
    install_app_settings,
    jupyter_config_path,
)
from tests.conftest import run_argv


def test_jupyter_settings_leave_the_host_check_to_the_relay(tmp_path: Path) -> None:
    path = install_app_settings(str(tmp_path / "jupyter"))
    assert Path(path).name == JUPYTER_SETTINGS_FILE
    assert json.loads(Path(path).read_text()) == {"ServerApp": {"allow_remote_access": True}}


def test_the_owners_jupyter_config_path_comes_first() -> None:
    assert jupyter_config_path(None) == APP_SETTINGS_DIR
    assert jupyter_config_path("") == APP_SETTINGS_DIR
    assert jupyter_config_path("/home/o/jc") == f"/home/o/jc:{APP_SETTINGS_DIR}"


SHOW = 'echo "path=${JUPYTER_CONFIG_PATH-unset}"; cat /run/sandbridge/jupyter/*.json'


def _shown(workdir: Path, *options: str) -> list[str]:
    """What a session with ``options`` shows of its Jupyter settings."""
    result = subprocess.run(
        run_argv(workdir, "sh", "-c", SHOW, options=options),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout.splitlines()


@pytest.mark.parametrize("net", ["none", "allow"])
def test_a_session_points_jupyter_at_the_settings(tmp_path: Path, net: str) -> None:
    lines = _shown(tmp_path, "--net", net)
    assert lines[0] == f"path={APP_SETTINGS_DIR}"
    assert json.loads(lines[1]) == {"ServerApp": {"allow_remote_access": True}}


def test_the_owners_jupyter_config_path_is_kept(tmp_path: Path) -> None:
    lines = _shown(tmp_path, "--env", "JUPYTER_CONFIG_PATH=/opt/jc")
    assert lines[0] == f"path=/opt/jc:{APP_SETTINGS_DIR}"


def test_with_the_hosts_network_jupyter_keeps_its_own_host_check(tmp_path: Path) -> None:
    # The app then listens on the host's loopback, where pages and other users reach it
    # without the relay's Host check.
    assert _shown(tmp_path, "--net", "full")[0] == "path=unset"
