"""The browsers of the end-to-end tests: one Playwright driver and one Chromium per worker.

A Chromium launched through Playwright (its Node driver, then the browser) costs about
2.5 CPU seconds; each module launched its own, and a few tests one more each. Every test
isolates itself with a browser context (or a page, which has one) of its own, so one
browser serves them all; each module's end closes whatever contexts its tests left open,
as closing the module's own browser did, so no page of one module runs into the next.
A test that needs other launch flags launches its own from the same driver (two sync
Playwright drivers in one thread would share its event loop's greenlets).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Playwright, sync_playwright

from tests.e2e.test_browser import CHROMIUM, CHROMIUM_ARGS


@pytest.fixture(scope="session")
def playwright_driver() -> Iterator[Playwright]:
    """Playwright's driver, for this worker's whole run."""
    with sync_playwright() as playwright:
        yield playwright


@pytest.fixture(scope="session")
def chromium(playwright_driver: Playwright) -> Iterator[Browser]:
    """Debian's Chromium with :data:`CHROMIUM_ARGS`, for this worker's whole run."""
    assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: ./dev.sh setup installs it"
    launched = playwright_driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield launched
    launched.close()


def close_contexts(browser: Browser) -> None:
    """Close every context (and so every page) still open in ``browser``."""
    for context in browser.contexts:
        context.close()


@pytest.fixture(scope="module")
def browser(chromium: Browser) -> Iterator[Browser]:
    """The worker's Chromium for a module's tests; what they left open is closed after."""
    yield chromium
    close_contexts(chromium)
