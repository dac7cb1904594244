"""Debian's Chromium as the end-to-end tests drive it: where it is, its flags, its launch,
and the server that keeps one for a whole worker.

The browser tests' fixtures are in ``tests/e2e/conftest.py``; the OAuth test launches one of
its own through its module's driver, for a launch flag no other test wants.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator

from playwright._impl._driver import compute_driver_executable
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


# Playwright's launchServer, run by the driver's own node: one Chromium, served on a
# loopback WebSocket whose path is a random secret, that every test module's driver
# connects to. The server ends when its stdin closes (the worker is done, or gone) and
# when its browser does (a crash), so that the next connection starts a new one.
_SERVE = """
const [pkg, executablePath, args] = [process.argv[1], process.argv[2], JSON.parse(process.argv[3])];
require(pkg).chromium.launchServer({executablePath, args}).then((server) => {
  server.on("close", () => process.exit(2));
  process.stdout.write(server.wsEndpoint() + "\\n");
  process.stdin.on("end", () => server.close().then(() => process.exit(0)));
  process.stdin.resume();
}, (error) => { process.stderr.write(`${error}\\n`); process.exit(1); });
"""


class ChromiumServer:
    """One Chromium for a whole pytest worker, in a process of its own.

    Each test module still runs its own Playwright driver (the sync API's event loop must
    not outlive the module: tests/e2e/conftest.py) and connects it to this browser, so a
    worker launches Chromium once, not once a module. Every module opens contexts of its
    own, which share no cookies, storage or cache; :meth:`endpoint` starts the server
    again if its browser has gone."""

    def __init__(self) -> None:
        self._server: subprocess.Popen[str] | None = None
        self._endpoint = ""

    def endpoint(self) -> str:
        """The WebSocket a driver connects to (``playwright.chromium.connect``)."""
        if self._server is None or self._server.poll() is not None:
            self._start()
        return self._endpoint

    def pid(self) -> int:
        """The server's process (its Chromium is a child of it)."""
        assert self._server is not None, "not started"
        return self._server.pid

    def close(self) -> None:
        """Close the browser and end the server."""
        if self._server is None:
            return
        server, self._server = self._server, None
        assert server.stdin is not None and server.stdout is not None
        server.stdin.close()
        server.stdout.close()
        server.wait(timeout=30)

    def _start(self) -> None:
        assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: ./dev.sh setup installs it"
        self.close()
        node, cli = compute_driver_executable()
        package = os.path.dirname(cli)
        argv = [node, "-e", _SERVE, package, CHROMIUM, json.dumps(CHROMIUM_ARGS)]
        self._server = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self._server.stdout is not None
        said = self._server.stdout.readline().strip()
        assert said.startswith("ws://127.0.0.1:"), (
            f"Chromium's server did not start (status {self._server.wait(timeout=30)})"
        )
        self._endpoint = said
