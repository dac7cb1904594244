"""Debian's Chromium as the end-to-end tests drive it: where it is and its flags.

One Chromium serves every browser test of a worker (``tests/e2e/conftest.py``); each test
opens its own browser context (its own cookie jar, cache and storage), so sharing the
browser shares nothing a test looks at. Only the OAuth test starts one of its own, for a
launch flag no other test wants.
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
