"""Debian's Chromium as the end-to-end tests drive it: where it is, its flags, its launch.

The browser tests' fixtures are in ``tests/e2e/conftest.py``; the OAuth test launches one of
its own through the same driver, for a launch flag no other test wants.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator

from playwright.sync_api import Browser, Playwright

CHROMIUM = "/usr/bin/chromium"
# Flags for a closed network and a root user: no background fetches, no sandbox of its own.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]


@contextlib.contextmanager
def launched_chromium(playwright: Playwright, *extra_args: str) -> Iterator[Browser]:
    """Chromium launched through ``playwright`` with :data:`CHROMIUM_ARGS` and
    ``extra_args``, closed after the block."""
    assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: ./dev.sh setup installs it"
    launched = playwright.chromium.launch(
        executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *extra_args]
    )
    try:
        yield launched
    finally:
        launched.close()
