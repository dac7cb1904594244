"""The end-to-end tests' browser: one Chromium a worker, started by the first test that
asks for it and closed when the worker's run ends (tests/e2e/browser.py).

Each browser module started its own (ten launches a run, about 2.5 CPU-s each with
Playwright's driver); pytest-xdist gives a worker many modules, so one a worker is at most
as many as workers. Every test still opens contexts of its own.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Playwright, sync_playwright

from tests.e2e.browser import CHROMIUM, CHROMIUM_ARGS


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    """Playwright's driver, one a worker: its sync API allows one at a time a thread."""
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
def chromium(playwright: Playwright) -> Iterator[Browser]:
    assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: ./dev.sh setup installs it"
    launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    try:
        yield launched
    finally:
        launched.close()


@pytest.fixture(scope="session")
def browser(chromium: Browser) -> Browser:
    """The browser a test drives: the worker's Chromium (a module may give another under
    this name, as the cookie tests give Firefox too)."""
    return chromium
