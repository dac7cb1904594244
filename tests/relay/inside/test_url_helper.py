"""``ags-webview-url`` usage and failures."""

from __future__ import annotations

import os
import subprocess

from tests.conftest import HELPER


def _run(
    *args: str, socket_path: str = "/nonexistent/relay.sock"
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGS_WEBVIEW_RELAY_SOCKET": socket_path}
    return subprocess.run([*HELPER, *args], env=env, capture_output=True, text=True, check=False)


def test_no_arguments_prints_usage_and_exits_2() -> None:
    result = _run()
    assert result.returncode == 2
    assert "usage: ags-webview-url <port> [base_path]" in result.stderr


def test_non_numeric_port_names_the_value() -> None:
    result = _run("abc")
    assert result.returncode == 2
    assert "got 'abc'" in result.stderr


def test_unreachable_relay_names_the_socket_and_exits_1() -> None:
    result = _run("8000")
    assert result.returncode == 1
    assert "/nonexistent/relay.sock unreachable" in result.stderr
