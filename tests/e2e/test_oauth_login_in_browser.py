"""A login inside the sandbox, finished in the owner's Chromium: the authorize page (a
stand-in provider on the host, under a name Chromium maps to it) redirects to the
login's loopback redirect_uri, the host carries that one callback in, and the code
arrives inside. A second visit of the callback finds nothing listening."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Playwright
from playwright.sync_api import Error as PlaywrightError

from tests.conftest import PYTHON, REPO, SANDBRIDGE, Process, free_port, run_argv
from tests.e2e.browser import launched_chromium

RECORDER = str(REPO / "tests" / "apps" / "record_browser.py")
LOGIN = str(REPO / "tests" / "apps" / "oauth_login.py")
AUTHORIZE_HOST = "auth.example.com"
CODE = "c0de-from-the-provider"
OPEN_WITHIN = 60.0


class Provider(http.server.BaseHTTPRequestHandler):
    """The authorize page: sends the browser on to the redirect_uri with a code."""

    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        back = urllib.parse.urlencode({"code": CODE, "state": query["state"][0]})
        self.send_response(302)
        self.send_header("Location", f"{query['redirect_uri'][0]}?{back}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    """A Chromium of this module's own (through the module's Playwright driver), with the
    provider's name mapped to the host's loopback: a launch flag no other test wants."""
    with launched_chromium(
        playwright, f"--host-resolver-rules=MAP {AUTHORIZE_HOST} 127.0.0.1"
    ) as launched:
        yield launched


@pytest.fixture
def provider() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Provider)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    thread.join()


def _opened(out: Path, session: Process) -> str:
    """The URL the host's browser command was run with (bounded polling of the file it
    writes; the session ending first fails the test with its output)."""
    deadline = time.monotonic() + OPEN_WITHIN
    while not (out.exists() and out.read_text().endswith("\n")):
        status = session.popen.poll()
        assert status is None, f"the session ended ({status}): {session.drain('stderr')}"
        assert time.monotonic() < deadline, f"no browser call in {OPEN_WITHIN} s"
        time.sleep(0.1)
    (argv,) = [json.loads(line) for line in out.read_text().splitlines()]
    url: str = argv[0]
    return url


@pytest.mark.timeout(300)
def test_a_login_inside_gets_its_code_through_the_owners_chromium(
    browser: Browser, tmp_path: Path, served: Process | None, provider: int
) -> None:
    """Served by the run's own host half, and by the daemon (``served``)."""
    config = tmp_path / "config"
    (config / "sandbridge").mkdir(parents=True)
    # The owner's own config turns the bridge on and allows the provider: no question.
    (config / "sandbridge" / "config").write_text(
        f"oauth_callbacks = on\nopen_external_allow = {AUTHORIZE_HOST}\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "browser.jsonl"
    port = free_port()
    authorize = f"http://{AUTHORIZE_HOST}:{provider}/authorize"
    options = ("--open", "browser", "--browser", f"{PYTHON} {RECORDER} {out}")
    go = work / "go"  # (the workdir: the sandbox's /tmp is its own)
    os.mkfifo(go)
    script = f"{PYTHON} {LOGIN} {port} {authorize} && read done < {go}"
    env = {**os.environ, "XDG_CONFIG_HOME": str(config), "HOME": str(tmp_path)}
    session = Process(run_argv(work, "sh", "-c", script, options=options), env=env)
    try:
        url = _opened(out, session)
        assert url.startswith(f"{authorize}?"), url
        page = browser.new_page()
        try:
            page.goto(url)
            page.wait_for_url(f"http://127.0.0.1:{port}/callback?*", timeout=30_000)
            assert "Logged in." in page.content()
            assert session.wait_line("code=", timeout=30) == f"code={CODE}"
            # The callback was carried once: its port is closed on the host now.
            with pytest.raises(PlaywrightError, match="ERR_CONNECTION_REFUSED"):
                page.goto(f"http://127.0.0.1:{port}/callback?code=again&state=x")
        finally:
            page.context.close()
        # `sandbridge status` lists the bridge and the callback, never its code.
        status = subprocess.run(
            [*SANDBRIDGE, "status"], capture_output=True, text=True, timeout=60, env=env
        )
        assert "  logins (OAuth callbacks): on\n" in status.stdout, status
        assert (
            f"    http://127.0.0.1:{port}/callback  from {AUTHORIZE_HOST}: relayed\n"
        ) in status.stdout
        assert CODE not in status.stdout
        go.write_text("done\n")
        assert session.popen.wait(60) == 0
    finally:
        if session.popen.poll() is None:
            session.stop()
    said = session.drain("stderr")
    assert f"(open_external_allow = {AUTHORIZE_HOST})" in said, said
    assert CODE not in said  # the code is never on the owner's terminal or in the log


@pytest.mark.timeout(300)
def test_a_late_callback_finds_nothing_listening_and_the_login_gets_no_code(
    browser: Browser, tmp_path: Path, xdg: Path, provider: int
) -> None:
    """``--oauth-callback-deadline``: the owner who finishes the login after it finds
    the host's port closed; the code never reaches the sandbox."""
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "browser.jsonl"
    port = free_port()
    authorize = f"http://{AUTHORIZE_HOST}:{provider}/authorize"
    options = (
        "--open", "browser", "--browser", f"{PYTHON} {RECORDER} {out}",
        "--open-external", "allow", "--oauth-callbacks", "--oauth-callback-deadline", "1",
    )  # fmt: skip
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "HOME": str(tmp_path)}
    session = Process(run_argv(work, PYTHON, LOGIN, str(port), authorize, options=options), env=env)
    try:
        url = _opened(out, session)
        session.wait_line(f"sandbridge: the login's callback on port {port}: expired", "stderr")
        page = browser.new_page()
        try:
            with pytest.raises(PlaywrightError, match="ERR_CONNECTION_REFUSED"):
                page.goto(url)
        finally:
            page.context.close()
    finally:
        status = session.stop()
    assert status != 0  # the login never got its code: ended by the test
    assert not any(line.startswith("code=") for line in session.lines["stdout"])
