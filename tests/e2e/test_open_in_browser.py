"""An agent's own localhost link, opened from inside the sandbox, works in Chromium: the
page loads from the host URL and its script sees the query and the fragment. ``jupyter
lab`` started as it is by default (it opens its browser through a ``file://`` redirect
page) gives the owner's browser command a URL that loads JupyterLab logged in."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests.conftest import PYTHON, REPO, Process, run_argv
from tests.e2e.test_real_apps import APPS_VENV, START_SECONDS

RECORDER = str(REPO / "tests" / "apps" / "record_browser.py")

PAGE = (
    "<!doctype html><title>loading</title><script>"
    "document.title = 'search=' + location.search + ' hash=' + location.hash;"
    "</script>"
)


def test_opened_localhost_url_loads_in_chromium_with_its_query(
    browser: Browser, tmp_path: Path
) -> None:
    (tmp_path / "index.html").write_text(PAGE)
    go = tmp_path / "go"
    os.mkfifo(go)
    script = (
        "mkfifo /tmp/ready; python3 -u -m http.server 4180 --bind 127.0.0.1 > /tmp/ready & "
        "read ready < /tmp/ready; "
        "xdg-open 'http://localhost:4180/index.html?x=1&y=two#frag'; "
        f"read x < {go}"
    )
    session = Process(run_argv(tmp_path, "sh", "-c", script, options=("--open", "print")))
    try:
        url = session.wait_line("http://")
        assert url.endswith("/index.html?x=1&y=two#frag")
        page = browser.new_page()
        try:
            page.goto(url)
            page.wait_for_function("document.title !== 'loading'", timeout=15_000)
            assert page.title() == "search=?x=1&y=two hash=#frag"
        finally:
            page.context.close()
    finally:
        go.write_text("done\n")
        assert session.popen.wait(60) == 0


def _first_open(out: Path, session: Process, within: float) -> str:
    """The one URL the host's browser command was run with (bounded polling of the file
    it writes; the session ending first fails the test with its output)."""
    deadline = time.monotonic() + within
    while not (out.exists() and out.read_text().endswith("\n")):
        status = session.popen.poll()
        assert status is None, f"the session ended ({status}): {session.drain('stderr')}"
        assert time.monotonic() < deadline, f"no browser call in {within} s"
        time.sleep(0.1)
    recorded = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recorded) == 1 and len(recorded[0]) == 1, recorded
    url: str = recorded[0][0]
    return url


@pytest.mark.timeout(300)
def test_jupyterlab_started_by_default_opens_logged_in_in_chromium(
    browser: Browser, tmp_path: Path
) -> None:
    python = APPS_VENV / "bin" / "python"
    assert python.exists(), f"{python} is missing: ./dev.sh setup makes it"
    out = tmp_path / "browser.jsonl"
    go = tmp_path / "go"
    os.mkfifo(go)
    # Jupyter's defaults: port 8888, a token of its own, and its browser opened through
    # file:///.../jpserver-N-open.html (--allow-root: these tests run as root).
    script = f"{python} -m jupyterlab --allow-root & read done < {go}"
    options = ("--open", "browser", "--browser", f"{PYTHON} {RECORDER} {out}")
    session = Process(run_argv(tmp_path, "sh", "-c", script, options=options))
    try:
        url = _first_open(out, session, START_SECONDS)
        assert "/lab?token=" in url and ".localhost:" in url, url
        page = browser.new_page()
        try:
            page.goto(url)
            expect(page.locator(".jp-Launcher").first).to_be_visible(timeout=90_000)
            # Logged in: the app's own API answers this origin's cookie, no token asked.
            status = page.evaluate("async () => (await fetch('/api/me')).status")
            assert status == 200
            assert page.locator("input[type=password]").count() == 0
        finally:
            page.context.close()
    finally:
        if session.popen.poll() is None:
            go.write_text("done\n")
        status = session.popen.wait(60)
    assert status == 0, session.drain("stderr")
