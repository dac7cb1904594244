"""Debian's Firefox ESR, driven over WebDriver BiDi, behind the few Playwright calls the
browser tests use.

Playwright drives Firefox only through its own patched build (a browser download, which
this project never makes) or, for a stock Firefox, through an experimental BiDi channel
that Firefox ESR does not fully answer (``emulation.setMediaFeaturesOverride``). Firefox
speaks the W3C WebDriver BiDi protocol itself (``--remote-debugging-port``): JSON
commands over one WebSocket, sent here with the ``websockets`` client already in use.

Only what the tests need: a user context per test (its own cookie jar), tabs, navigation
with the response status, scripts, the cookie store and load events. Every wait is on a
protocol answer or event, bounded by :data:`TIMEOUT`.

The profile sends every request that is not to loopback to a closed loopback port and
turns off Firefox's own background services (updates, telemetry, remote settings, safe
browsing, captive-portal and connectivity checks), so a test reaches no other machine.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

FIREFOX = "firefox-esr"
DEBUGGING = ("--remote-debugging-port", "0")  # BiDi on a free port, printed on stderr
TIMEOUT = 30.0
# A loopback port nothing listens on (discard): where every non-loopback request goes.
DEAD_PROXY_PORT = 9
PREFS = {
    "network.proxy.type": 1,
    "network.proxy.http": "127.0.0.1",
    "network.proxy.http_port": DEAD_PROXY_PORT,
    "network.proxy.ssl": "127.0.0.1",
    "network.proxy.ssl_port": DEAD_PROXY_PORT,
    "network.proxy.no_proxies_on": "localhost, 127.0.0.1, .localhost",
    "network.proxy.allow_hijacking_localhost": False,
    "network.captive-portal-service.enabled": False,
    "network.connectivity-service.enabled": False,
    "network.dns.disablePrefetch": True,
    "network.prefetch-next": False,
    "services.settings.server": f"http://127.0.0.1:{DEAD_PROXY_PORT}/v1",
    "app.update.disabledForTesting": True,
    "app.normandy.enabled": False,
    "toolkit.telemetry.enabled": False,
    "datareporting.policy.dataSubmissionEnabled": False,
    "browser.safebrowsing.malware.enabled": False,
    "browser.safebrowsing.phishing.enabled": False,
    "browser.safebrowsing.downloads.enabled": False,
    "browser.region.update.enabled": False,
    "browser.region.network.url": "",
    "browser.newtabpage.enabled": False,
    "browser.startup.page": 0,
    "browser.startup.homepage": "about:blank",
    "extensions.update.enabled": False,
    "extensions.getAddons.cache.enabled": False,
    "extensions.blocklist.enabled": False,
    "dom.security.https_first": False,
    "dom.security.https_only_mode": False,
    # JSON as text, as Chromium shows it (the tests read the echo app's JSON).
    "devtools.jsonview.enabled": False,
}


# A navigation's responses of these statuses are followed: its status is the last one's.
REDIRECTS = frozenset({301, 302, 303, 307, 308})


class BidiError(RuntimeError):
    pass


class Firefox:
    """One Firefox process and its BiDi session."""

    def __init__(self) -> None:
        binary = shutil.which(FIREFOX)
        assert binary, f"{FIREFOX} is missing: ./dev.sh setup installs it"
        self._profile = tempfile.TemporaryDirectory(prefix="sandbridge-firefox-")
        prefs = "".join(
            f"user_pref({json.dumps(name)}, {json.dumps(value)});\n"
            for name, value in PREFS.items()
        )
        (Path(self._profile.name) / "user.js").write_text(prefs)
        self._process = subprocess.Popen(
            [binary, "--headless", "--no-remote", "--profile", self._profile.name, *DEBUGGING],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._closing = contextlib.ExitStack()
        self._socket = self._closing.enter_context(
            connect(self._endpoint() + "/session", max_size=None)
        )
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        self.call("session.new", capabilities={"alwaysMatch": {"acceptInsecureCerts": False}})
        self.call(
            "session.subscribe",
            events=["browsingContext.load", "network.responseCompleted"],
        )

    def _endpoint(self) -> str:
        assert self._process.stderr is not None
        for line in self._process.stderr:
            found = re.search(r"WebDriver BiDi listening on (ws://\S+)", line)
            if found:
                # Firefox goes on logging: read it all, so a full pipe never stalls it.
                threading.Thread(target=self._process.stderr.read, daemon=True).start()
                return found.group(1)
        raise BidiError(f"{FIREFOX} exited ({self._process.wait()}) before offering BiDi")

    @property
    def socket(self) -> ClientConnection:
        return self._socket

    def _receive(self, deadline: float) -> dict[str, Any]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer from Firefox in time")
        message: dict[str, Any] = json.loads(self._socket.recv(timeout=left))
        return message

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command; return its result (events that arrive meanwhile are kept)."""
        number = next(self._ids)
        self._socket.send(json.dumps({"id": number, "method": method, "params": params}))
        deadline = time.monotonic() + TIMEOUT
        while True:
            message = self._receive(deadline)
            if message.get("id") == number:
                if message.get("type") == "error":
                    raise BidiError(f"{method}: {message.get('error')}: {message.get('message')}")
                result: dict[str, Any] = message["result"]
                return result
            if message.get("type") == "event":
                self.events.append(message)

    def wait_event(self, matches: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first kept or coming event that ``matches`` (removed from the kept ones)."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            for event in self.events:
                if matches(event):
                    self.events.remove(event)
                    return event
            message = self._receive(deadline)
            if message.get("type") == "event":
                self.events.append(message)

    def new_context(self) -> FirefoxContext:
        return FirefoxContext(self, self.call("browser.createUserContext")["userContext"])

    def close(self) -> None:
        try:
            self.call("session.end")
        finally:
            self._closing.close()
            self._process.terminate()
            self._process.wait(timeout=TIMEOUT)
            self._profile.cleanup()


class FirefoxContext:
    """A BiDi user context: its own cookie jar and storage, like a Playwright context."""

    def __init__(self, firefox: Firefox, user_context: str) -> None:
        self.firefox = firefox
        self.id = user_context

    def new_page(self) -> FirefoxPage:
        created = self.firefox.call("browsingContext.create", type="tab", userContext=self.id)
        return FirefoxPage(self.firefox, created["context"])

    def cookies(self) -> list[dict[str, str]]:
        """Every cookie of this context, as ``name``, ``value``, ``domain``."""
        found = self.firefox.call(
            "storage.getCookies", partition={"type": "storageKey", "userContext": self.id}
        )
        return [
            {"name": c["name"], "value": c["value"]["value"], "domain": c["domain"]}
            for c in found["cookies"]
        ]

    def close(self) -> None:
        self.firefox.call("browser.removeUserContext", userContext=self.id)


class FirefoxResponse:
    def __init__(self, status: int, text: str) -> None:
        self.status = status
        self._text = text

    def text(self) -> str:
        return self._text


class FirefoxPage:
    def __init__(self, firefox: Firefox, context: str) -> None:
        self.firefox = firefox
        self.context = context

    def goto(self, url: str) -> FirefoxResponse:
        """Navigate and wait for the load; the status is that of the document's response."""
        navigation = self.firefox.call(
            "browsingContext.navigate", context=self.context, url=url, wait="complete"
        )["navigation"]
        event = self.firefox.wait_event(
            lambda e: (
                e["method"] == "network.responseCompleted"
                and e["params"]["context"] == self.context
                and e["params"].get("navigation") == navigation
                and e["params"]["response"]["status"] not in REDIRECTS
            )
        )
        status = int(event["params"]["response"]["status"])
        return FirefoxResponse(status, str(self.evaluate("document.body?.textContent ?? ''")))

    def evaluate(self, expression: str, arg: str | None = None) -> Any:
        """A script's value (strings, numbers, booleans, undefined); with ``arg``,
        ``expression`` is a function called with it, as in Playwright."""
        target = {"context": self.context}
        if arg is None:
            result = self.firefox.call(
                "script.evaluate", expression=expression, target=target, awaitPromise=True
            )
        else:
            result = self.firefox.call(
                "script.callFunction",
                functionDeclaration=expression,
                arguments=[{"type": "string", "value": arg}],
                target=target,
                awaitPromise=True,
            )
        if result["type"] == "exception":
            raise BidiError(f"script failed: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def wait_for_url(self, url: str) -> None:
        """Until this tab has loaded ``url``."""
        self.firefox.wait_event(
            lambda e: (
                e["method"] == "browsingContext.load"
                and e["params"]["context"] == self.context
                and e["params"]["url"] == url
            )
        )

    def close(self) -> None:
        self.firefox.call("browsingContext.close", context=self.context)
