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
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

# Private, but the one place that knows where the driver's node and package are; the lock
# file pins Playwright, and a release without it fails every browser test at import.
from playwright._impl._driver import compute_driver_executable
from playwright.sync_api import Browser, Playwright
from playwright.sync_api import Error as PlaywrightError

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


# How long a server may take to launch its browser, to answer a connection, or to close
# its browser: more than Playwright's own 30 s grace before it kills a browser that does
# not close, so that the kill and the profile's removal stay Playwright's.
SERVER_SECONDS = 45
# Playwright's launchServer, run by the driver's own node: one Chromium, served on a
# 127.0.0.1 WebSocket whose path is a random secret, that every test module's driver
# connects to. Its first line is the endpoint and the browser's pid. The server ends when
# its stdin closes (the worker is done, or gone) and when its browser does (a crash:
# status 2), so that the next connection starts a new one; a launch that fails or takes
# longer than SERVER_SECONDS ends it with status 1. It ends by itself, not by
# process.exit: Playwright removes the browser's profile and artifacts directories after
# the browser's close event, which an exit there skipped.
_SERVE = """
const [pkg, executablePath, args, timeout] = [
  process.argv[1], process.argv[2], JSON.parse(process.argv[3]), Number(process.argv[4]),
];
let closing = false;
require(pkg).chromium.launchServer({executablePath, args, timeout, host: "127.0.0.1"}).then(
  (server) => {
    server.on("close", () => { process.exitCode = closing ? 0 : 2; process.stdin.destroy(); });
    process.stdout.write(`${server.wsEndpoint()} ${server.process().pid}\\n`);
    process.stdin.on("end", () => { closing = true; server.close(); });
    process.stdin.resume();
  },
  (error) => { process.stderr.write(`${error}\\n`); process.exit(1); },
);
"""


class ChromiumServer:
    """One Chromium for a whole pytest worker, in a process of its own.

    Each test module still runs its own Playwright driver (the sync API's event loop must
    not outlive the module: tests/e2e/conftest.py) and connects it to this browser, so a
    worker launches Chromium once, not once a module. Every module opens contexts of its
    own, which share no cookies, storage or cache, and those a module leaves open close
    when its driver disconnects. :meth:`connect` starts the server again if its browser
    has gone. ``temp_dir`` is the server's ``TMPDIR``: the browser's profile lives there
    while it runs, and Playwright removes it when the browser ends, closed or crashed;
    what stays there is what a killed server leaves."""

    def __init__(self, temp_dir: Path) -> None:
        self._temp_dir = temp_dir
        self._server: subprocess.Popen[str] | None = None
        self._endpoint = ""
        self._browser_pid = 0

    def connect(self, playwright: Playwright) -> Browser:
        """The browser, through ``playwright``'s driver; a server whose browser has gone
        (ended, or about to end) is started anew, once."""
        if self._server is None or self._server.poll() is not None:
            self._start()
        try:
            return self._answering(playwright)
        except PlaywrightError:
            self._start()
            return self._answering(playwright)

    def _answering(self, playwright: Playwright) -> Browser:
        """A connection whose browser has answered once: a server whose browser has just
        died still takes connections until it has seen the death."""
        browser = playwright.chromium.connect(self._endpoint, timeout=SERVER_SECONDS * 1000)
        try:
            browser.new_browser_cdp_session().detach()
        except PlaywrightError:
            with contextlib.suppress(PlaywrightError):
                browser.close()
            raise
        return browser

    def pid(self) -> int:
        """The server's process (its Chromium is a child of it)."""
        assert self._server is not None, "not started"
        return self._server.pid

    def close(self) -> None:
        """Close the browser and end the server; past :data:`SERVER_SECONDS`, both are
        killed (the browser leads a process group of its own, which node's death leaves
        running)."""
        if self._server is None:
            return
        server, self._server = self._server, None
        assert server.stdin is not None and server.stdout is not None
        with contextlib.suppress(BrokenPipeError):
            server.stdin.close()
        server.stdout.close()
        try:
            server.wait(timeout=SERVER_SECONDS)
        except subprocess.TimeoutExpired:
            if self._browser_pid:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._browser_pid, signal.SIGKILL)
            server.kill()
            server.wait()
        self._browser_pid = 0

    def _start(self) -> None:
        assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: ./dev.sh setup installs it"
        self.close()
        self._endpoint = ""
        node, cli = compute_driver_executable()
        package = os.path.dirname(cli)
        timeout = str(SERVER_SECONDS * 1000)
        argv = [node, "-e", _SERVE, package, CHROMIUM, json.dumps(CHROMIUM_ARGS), timeout]
        env = {**os.environ, "TMPDIR": str(self._temp_dir)}
        server = self._server = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert server.stdout is not None
        endpoint, _, pid = server.stdout.readline().strip().partition(" ")
        if not endpoint.startswith("ws://127.0.0.1:") or not pid.isdigit():
            self.close()
            raise AssertionError(f"Chromium's server did not start (status {server.returncode})")
        self._endpoint, self._browser_pid = endpoint, int(pid)
