"""The PTY worker's pure parts: its clean environment and its view of descendants."""

from __future__ import annotations

import os
import subprocess

import pytest

from sandbridge.terminals import pty_worker


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ("xterm-256color", "xterm-256color"),
        ("screen.xterm", "screen.xterm"),
        ("x; rm -rf /", "xterm-256color"),
        ("", "xterm-256color"),
        ("a" * 65, "xterm-256color"),
    ],
)
def test_clean_environment_keeps_only_its_own_names(term: str, expected: str) -> None:
    env = pty_worker.clean_environment(term, "/home/x", "/bin/bash")
    assert sorted(env) == ["HOME", "LANG", "PATH", "PS1", "SANDBRIDGE_TERMINAL", "SHELL", "TERM"]
    assert env["TERM"] == expected
    assert not set(env) & {"HOST_SECRET", "AGS_WEBVIEW_RELAY_SOCKET", "SSH_AUTH_SOCK"}


def test_descendants_include_grandchildren_and_exclude_others() -> None:
    child = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE)
    assert child.stdout is not None
    grandchild = int(child.stdout.readline())
    try:
        found = pty_worker.descendants(os.getpid())
        assert child.pid in found and grandchild in found
        assert os.getppid() not in found
    finally:
        os.kill(grandchild, 9)
        child.wait()
