"""``sandbridge ui``: opens the one-time URL with the owner's browser command, or prints it."""

from __future__ import annotations

import http.client
import re
import resource
import select
import subprocess
import time
import urllib.parse
from pathlib import Path

from tests.conftest import SANDBRIDGE, STARTS_A_DAEMON, Process


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700, exist_ok=True)
    return {"PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": str(xdg), "HOME": str(tmp_path), **extra}


def _status(url: str) -> int:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=10)
    try:
        conn.request("GET", f"{parts.path}?{parts.query}", headers={"Host": parts.netloc})
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_url_goes_to_the_browser_command_on_a_desktop(tmp_path: Path) -> None:
    opened = tmp_path / "opened"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\nprintf %s "$1" > {opened}.tmp && mv {opened}.tmp {opened}\n')
    browser.chmod(0o755)
    ui = Process([*SANDBRIDGE, "ui", "--browser", str(browser)], env=_env(tmp_path, DISPLAY=":99"))
    try:
        ui.wait_line("sandbridge: dashboard opened in the browser", "stderr")
        deadline = time.monotonic() + 10
        while not opened.exists():
            assert time.monotonic() < deadline, "the browser command was not run"
            select.select([], [], [], 0.05)
        url = opened.read_text()
        assert re.fullmatch(r"http://[a-z2-7]{26}\.localhost:\d+/\?token=\S+", url), url
        assert _status(url) == 303
        assert _status(url) == 403  # once
    finally:
        assert ui.stop() == 0


def test_without_a_desktop_the_url_is_printed(tmp_path: Path) -> None:
    ui = Process([*SANDBRIDGE, "ui"], env=_env(tmp_path))
    try:
        url = ui.wait_line("http://")
        ui.wait_line("sandbridge: dashboard: open the URL above", "stderr")
        # the human line only: its key=value event (ui.listening port=...) is -v's
        assert [line for line in ui.lines["stderr"] if "ui.listening" in line] == []
        assert _status(url) == 303
    finally:
        assert ui.stop() == 0


def test_without_a_daemon_it_says_it_serves_the_page_itself(tmp_path: Path) -> None:
    ui = Process([*SANDBRIDGE, "ui", "--print-url"], env=_env(tmp_path))
    try:
        ui.wait_line("sandbridge: no daemon runs: this process serves the dashboard", "stderr")
        assert _status(ui.wait_line("http://")) == 303
    finally:
        assert ui.stop() == 0


@STARTS_A_DAEMON
def test_with_a_daemon_it_prints_the_daemons_url_and_returns(tmp_path: Path) -> None:
    env = _env(tmp_path)
    daemon = Process([*SANDBRIDGE, "daemon"], env=env)
    try:
        daemon.wait_line("sandbridge: daemon ", "stderr")
        ui = Process([*SANDBRIDGE, "ui", "--print-url"], env=env)
        url = ui.wait_line("http://")
        assert ui.popen.wait(30) == 0, "the daemon serves the page: nothing to wait for"
        assert ui.wait_line("sandbridge: dashboard: open the URL above", "stderr").endswith(
            "the daemon serves it"
        )
        assert _status(url) == 303
        # --no-daemon: this process serves its own page, beside the daemon's
        own = Process([*SANDBRIDGE, "ui", "--print-url", "--no-daemon"], env=env)
        try:
            own_url = own.wait_line("http://")
            assert urllib.parse.urlsplit(own_url).port != urllib.parse.urlsplit(url).port
            assert _status(own_url) == 303
        finally:
            assert own.stop() == 0
    finally:
        daemon.stop()


def test_the_page_served_here_dumps_no_core_into_its_working_directory(tmp_path: Path) -> None:
    # This process holds the dashboard's cookie and signs the page's approvals with the
    # owner key: with `ulimit -c unlimited` and core_pattern `core`, a crash wrote them
    # into its working directory, often a project's.
    def unlimited_cores() -> None:
        hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
        resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))

    ui = Process(
        [*SANDBRIDGE, "ui", "--print-url"],
        env=_env(tmp_path),
        cwd=tmp_path,
        preexec_fn=unlimited_cores,
    )
    try:
        ui.wait_line("http://")
        limits = Path(f"/proc/{ui.popen.pid}/limits").read_text()
    finally:
        assert ui.stop() == 0
    [line] = [line for line in limits.splitlines() if line.startswith("Max core file size")]
    assert line.split()[4] == "0", line


def test_a_browser_command_that_does_not_exist_is_refused_naming_it(tmp_path: Path) -> None:
    for browser, why in (
        (str(tmp_path / "nonexistent"), "no such executable"),
        ("no-such-browser --new-window", "not found on PATH"),
    ):
        result = subprocess.run(
            [*SANDBRIDGE, "ui", "--browser", browser],
            env=_env(tmp_path, DISPLAY=":99"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr == (
            f"sandbridge: --browser {browser!r}: {why}; give a browser command that is "
            "installed (e.g. firefox), or --print-url\n"
        )
