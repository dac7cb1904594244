"""The sandbox's PATH: the owner's, in its order, after sandbridge's own commands only."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import run_argv

COMMANDS_DIR = "/run/sandbridge/bin"


def test_owner_path_order_is_kept_and_only_sandbridge_commands_are_added(
    backend: str, tmp_path: Path, xdg: Path
) -> None:
    venv = tmp_path / "project-venv" / "bin"
    venv.mkdir(parents=True)
    fake = venv / "python3"
    fake.write_text("#!/bin/sh\necho project-python\n")
    fake.chmod(0o755)
    owner_path = f"{venv}:{os.environ['PATH']}"
    result = subprocess.run(
        run_argv(
            tmp_path,
            "sh",
            "-c",
            f'python3; echo "$PATH"; echo "$BROWSER"; ls {COMMANDS_DIR}',
            options=("--backend", backend),
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PATH": owner_path},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "project-python",
        f"{COMMANDS_DIR}:{owner_path}",
        f"{COMMANDS_DIR}/sandbridge-open",
        "ags-webview-url",
        "sandbridge-allow",
        "sandbridge-open",
        "sensible-browser",
        "www-browser",
        "x-www-browser",
        "xdg-open",
    ]
