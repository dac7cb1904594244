"""A run the daemon's builder hands to a thin client: the session's dirs are the
client's (its pid), and the builder removes them at the end, however the client ends."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from tests.conftest import SANDBRIDGE, Process, run_argv
from tests.daemon.test_server import wait_until


def sessions() -> list[dict[str, object]]:
    listed = subprocess.run(
        [*SANDBRIDGE, "ls", "--json"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    found: list[dict[str, object]] = json.loads(listed)
    return found


def test_a_killed_client_leaves_no_session_behind(
    daemon: Process, xdg: Path, tmp_path: Path
) -> None:
    client = Process(run_argv(tmp_path, "sh", "-c", "echo READY; exec sleep 600"))
    client.wait_line("READY")
    runtime_dir = xdg / f"ags-webview-relay-{client.popen.pid}"
    assert runtime_dir.is_dir()
    client.stop(signal.SIGKILL)
    wait_until(lambda: not runtime_dir.exists())
    assert sessions() == []
    daemon.wait_line("sandbridge: daemon.session_end ", "stderr")
