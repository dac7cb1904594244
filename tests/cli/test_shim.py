"""``sandbridge shim`` as a container runs it: its sockets while it runs, none after."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.conftest import SANDBRIDGE, Process


def test_terminals_serves_terminal_sock_beside_the_socket_until_stopped(tmp_path: Path) -> None:
    socket_path = str(tmp_path / "upstream.sock")
    shim = Process([*SANDBRIDGE, "shim", "--socket", socket_path, "--terminals"])
    try:
        line = shim.wait_line("sandbridge: terminal workers start on", "stderr")
        assert line.endswith(str(tmp_path / "terminal.sock"))
        assert stat.S_IMODE(os.stat(tmp_path / "terminal.sock").st_mode) == 0o600
    finally:
        assert shim.stop() == 128 + 15
    assert not (tmp_path / "terminal.sock").exists()


def test_without_terminals_there_is_no_terminal_sock(tmp_path: Path) -> None:
    shim = Process([*SANDBRIDGE, "shim", "--socket", str(tmp_path / "upstream.sock")])
    try:
        shim.wait_line("sandbridge: shim listening", "stderr")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["upstream.sock"]
    finally:
        shim.stop()
