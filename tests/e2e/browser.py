"""Debian's Chromium as the end-to-end tests drive it: where it is and its flags.

The browser tests' fixtures are in ``tests/e2e/conftest.py``; the OAuth test launches one of
its own through the same driver, for a launch flag no other test wants.
"""

from __future__ import annotations

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
