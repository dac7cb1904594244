"""The end-to-end tests' browser, defined once: Debian's Chromium (tests/e2e/browser.py)
through Playwright's driver, one of each a test module, started by its first test that asks
for it. Every test opens contexts of its own.

Not one a worker: while Playwright's driver is up, its event loop counts as running in the
worker's thread (its sync API runs the loop in a greenlet beside the tests), so every
``asyncio.run`` on that worker fails. A driver kept for the whole run failed 318 tests of
other folders (and of this one: the WebSocket tests) in a clean-clone run; module scope
closes it before the worker's next file.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Playwright, sync_playwright

from tests.e2e.browser import launched_chromium


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    """Playwright's driver: its sync API allows one at a time in a thread."""
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def chromium(playwright: Playwright) -> Iterator[Browser]:
    with launched_chromium(playwright) as launched:
        yield launched


@pytest.fixture(scope="module")
def browser(chromium: Browser) -> Browser:
    """The browser a test drives: the module's Chromium (a module may give another under
    this name, as the cookie tests give Firefox too)."""
    return chromium
