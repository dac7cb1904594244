"""The worker's Chromium (tests/e2e/browser.py's ChromiumServer): one browser for every
module's driver, nothing kept between their contexts, and a browser that died is launched
anew for the next module."""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from tests.e2e.browser import ChromiumServer

SITE = "http://app.localhost/"


@pytest.fixture
def server() -> Iterator[ChromiumServer]:
    started = ChromiumServer()
    try:
        yield started
    finally:
        started.close()


def _browser_pids(server_pid: int) -> list[int]:
    """The server's Chromium: its children (the browser's own processes are its
    grandchildren)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            if int(fields[1]) == server_pid:
                pids.append(int(entry.name))
    return pids


def _cookies_seen_by_a_new_driver(endpoint: str, set_one: bool) -> list[str]:
    """A driver of its own (as a test module has) connected to ``endpoint``: the cookies
    a new context of its has for :data:`SITE`, after adding one if ``set_one``."""
    with sync_playwright() as driver:
        browser = driver.chromium.connect(endpoint)
        try:
            context = browser.new_context()
            if set_one:
                context.add_cookies([{"name": "kept", "value": "1", "url": SITE}])
            return [cookie["name"] for cookie in context.cookies(SITE)]
        finally:
            browser.close()


def test_two_drivers_in_turn_share_one_browser_but_no_cookies(server: ChromiumServer) -> None:
    endpoint = server.endpoint()
    [browser] = _browser_pids(server.pid())
    assert _cookies_seen_by_a_new_driver(endpoint, set_one=True) == ["kept"]
    assert _cookies_seen_by_a_new_driver(server.endpoint(), set_one=False) == []
    assert server.endpoint() == endpoint
    assert _browser_pids(server.pid()) == [browser]


def test_a_browser_that_died_is_launched_anew_for_the_next_driver(
    server: ChromiumServer,
) -> None:
    first = server.endpoint()
    first_server = server.pid()
    [browser] = _browser_pids(first_server)
    ended = os.pidfd_open(first_server)
    try:
        os.kill(browser, signal.SIGKILL)
        # The server ends with its browser; waited for on its pidfd, not by a sleep.
        assert select.select([ended], [], [], 30)[0] == [ended], "the server outlived it"
    finally:
        os.close(ended)
    second = server.endpoint()
    assert second != first and server.pid() != first_server
    assert _cookies_seen_by_a_new_driver(second, set_one=False) == []
