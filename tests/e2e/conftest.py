"""The end-to-end tests' browser, defined once: Debian's Chromium (tests/e2e/browser.py),
one a worker, launched by the first test that asks for it and kept by a server process of
its own; each test module's Playwright driver connects to it. Every test opens contexts of
its own.

The driver is one a module, not one a worker: while Playwright's sync driver is up, its
event loop counts as running in the worker's thread (its sync API runs the loop in a
greenlet beside the tests), so every ``asyncio.run`` on that worker fails. A driver kept for
the whole run failed 318 tests of other folders (and of this one: the WebSocket tests) in a
clean-clone run; module scope closes it before the worker's next file. The browser lives in
another process, so it can outlive the drivers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Playwright, sync_playwright

from tests.e2e.browser import ChromiumServer


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    """Playwright's driver: its sync API allows one at a time in a thread."""
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
def chromium_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromiumServer]:
    """The worker's Chromium, served to the modules' drivers."""
    server = ChromiumServer(tmp_path_factory.mktemp("chromium"))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def chromium(playwright: Playwright, chromium_server: ChromiumServer) -> Iterator[Browser]:
    """The worker's Chromium through this module's driver; closing it closes the
    module's contexts and leaves the browser to the next module."""
    connected = chromium_server.connect(playwright)
    try:
        yield connected
    finally:
        connected.close()


@pytest.fixture(scope="module")
def browser(chromium: Browser) -> Browser:
    """The browser a test drives: the worker's Chromium through the module's driver (a
    module may give another under this name, as the cookie tests give Firefox too)."""
    return chromium
