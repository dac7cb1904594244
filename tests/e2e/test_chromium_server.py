"""The worker's Chromium (tests/e2e/browser.py's ChromiumServer): one browser for every
module's driver, nothing a module left open kept for the next, a browser that died
launched anew for the next module, and nothing left behind when it closes."""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from benchmarks.proc import children
from tests.e2e.browser import ChromiumServer

SITE = "http://app.localhost/"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ChromiumServer]:
    started = ChromiumServer(tmp_path)
    try:
        yield started
    finally:
        started.close()


def _leave_a_context_open(server: ChromiumServer) -> None:
    """What a module that closes nothing does: a driver of its own, a context with a
    cookie and a page, then its driver gone."""
    with sync_playwright() as driver:
        context = server.connect(driver).new_context()
        context.add_cookies([{"name": "kept", "value": "1", "url": SITE}])
        context.new_page().set_content("<p>left open</p>")


def _contexts_a_new_driver_finds(server: ChromiumServer) -> list[str]:
    """The browser's contexts (other than its default one) as the next module's driver
    finds them, asked of Chromium itself."""
    with sync_playwright() as driver:
        browser = server.connect(driver)
        try:
            return _contexts(browser)
        finally:
            browser.close()


def _contexts(browser: Browser) -> list[str]:
    """``browser``'s contexts other than its default one, asked of Chromium itself."""
    session = browser.new_browser_cdp_session()
    ids: list[str] = session.send("Target.getBrowserContexts")["browserContextIds"]
    return ids


def test_the_next_driver_gets_the_same_browser_without_what_the_last_left_open(
    server: ChromiumServer,
) -> None:
    _leave_a_context_open(server)
    first = server.pid()
    [browser] = children(first)
    # The server closes a gone driver's contexts after the disconnect, not before the
    # next connection: asked again, each time a round trip, until they are gone.
    deadline = time.monotonic() + 30
    while (left := _contexts_a_new_driver_finds(server)) and time.monotonic() < deadline:
        pass
    assert left == []
    assert server.pid() == first
    assert children(first) == [browser]


def _kill_the_browser(server: ChromiumServer, wait: bool) -> int:
    """Kill the server's Chromium; with ``wait``, until the server has ended too (on
    its pidfd, not by a sleep). The server's pid."""
    first = server.pid()
    [browser] = children(first)
    ended = os.pidfd_open(first)
    try:
        os.kill(browser, signal.SIGKILL)
        if wait:
            assert select.select([ended], [], [], 30)[0] == [ended], "the server outlived it"
    finally:
        os.close(ended)
    return first


@pytest.mark.parametrize("wait", [True, False], ids=["server-ended", "server-ending"])
def test_a_browser_that_died_is_launched_anew_for_the_next_driver(
    server: ChromiumServer, wait: bool
) -> None:
    with sync_playwright() as driver:
        server.connect(driver).close()
        first = _kill_the_browser(server, wait)
        # At once. Without the wait, the server may still be taking connections for a
        # browser that is gone, or may have ended already: which of the two this run
        # met is not told apart, and either must end in a new browser.
        browser = server.connect(driver)
        try:
            assert _contexts(browser) == []
        finally:
            browser.close()
    assert server.pid() != first


def test_a_closed_server_leaves_no_profile_behind(server: ChromiumServer, tmp_path: Path) -> None:
    with sync_playwright() as driver:
        server.connect(driver).new_context().new_page().set_content("<p>x</p>")
    assert list(tmp_path.iterdir()) != []  # the profile, while the browser runs
    server.close()
    assert list(tmp_path.iterdir()) == []


def test_the_browser_leads_a_process_group_a_kill_can_end(server: ChromiumServer) -> None:
    """What a server killed past its time would leave running: the server's close kills
    this group then."""
    with sync_playwright() as driver:
        server.connect(driver).close()
    [browser] = children(server.pid())
    assert os.getpgid(browser) == browser
