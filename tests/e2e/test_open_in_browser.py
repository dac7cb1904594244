"""An agent's own localhost link, opened from inside the sandbox, works in Chromium: the
page loads from the host URL and its script sees the query and the fragment."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from playwright.sync_api import sync_playwright

from tests.conftest import Process, run_argv
from tests.e2e.test_browser import CHROMIUM, CHROMIUM_ARGS

PAGE = (
    "<!doctype html><title>loading</title><script>"
    "document.title = 'search=' + location.search + ' hash=' + location.hash;"
    "</script>"
)


def test_opened_localhost_url_loads_in_chromium_with_its_query(tmp_path: Path) -> None:
    assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: ./dev.sh setup installs it"
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
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page()
                page.goto(url)
                page.wait_for_function("document.title !== 'loading'", timeout=15_000)
                assert page.title() == "search=?x=1&y=two hash=#frag"
            finally:
                browser.close()
    finally:
        go.write_text("done\n")
        assert session.popen.wait(60) == 0
