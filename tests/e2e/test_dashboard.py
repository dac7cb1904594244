"""The dashboard in Debian's Chromium, driven by Playwright, over a real session.

``sandbridge ui --print-url`` serves the page; ``sandbridge run`` (the terminals harness)
runs the session; the page's buttons do what the owner's commands do.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import re
import select
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect

from sandbridge.exceptions import ControlError
from sandbridge.terminals import keys
from sandbridge.ui.server import Dashboard as ServedDashboard
from tests.conftest import ECHO_APP, PYTHON, SANDBRIDGE, Process, port_is_open, run_argv
from tests.egress.test_in_sandbox import in_world
from tests.egress.test_requests_in_sandbox import ALLOW_TEXT, ASKER, World
from tests.support.command_in_process import sandbridge
from tests.terminals.harness import PROMPT, TerminalSession, finish

HOSTILE = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'
# The sandbox's command: wait for the test's go-ahead, try a destination the policy
# does not allow (through the egress proxy curl is given), then stay up.
# Then, told to, ask the owner for another destination and write down the answer.
COMMAND = (
    "while [ ! -e go ]; do sleep 0.05; done; "
    "curl -s -o /dev/null http://blocked.example/ ; "
    "while [ ! -e ask ]; do sleep 0.05; done; "
    'sandbridge-allow asked.example:443 --reason "$(cat ask)"; echo $? > asked; exec sleep 600'
)
# COMMAND (test_daemon_dashboard.py's too) with the go-ahead and the reason read from
# FIFOs the test writes (fifo_session): the polling loops above start a ``sleep`` 20
# times a second for as long as the test runs.
FIFO_COMMAND = (
    "cat go > /dev/null; "
    "curl -s -o /dev/null http://blocked.example/ ; "
    'sandbridge-allow asked.example:443 --reason "$(cat ask)"; echo $? > asked; exec sleep 600'
)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[TerminalSession]:
    """A session of :data:`FIFO_COMMAND`, its FIFOs made in the work dir first."""
    work = tmp_path / "work"
    work.mkdir()
    for name in ("go", "ask"):
        os.mkfifo(work / name)
    running = TerminalSession(tmp_path, command=FIFO_COMMAND)
    yield running
    running.stop()


def tell(fifo: Path, text: str = "") -> None:
    """Write ``text`` to the sandbox's command through ``fifo`` once it reads it (bounded:
    a command that never gets there fails the test), then close it (its end of file)."""
    deadline = time.monotonic() + 15
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as error:
            if error.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
        assert time.monotonic() < deadline, f"nothing in the sandbox read {fifo}"
        select.select([], [], [], 0.05)
    try:
        os.set_blocking(fd, True)
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def terminal_request(session: TerminalSession, *options: str) -> str:
    """``sandbridge terminal request web --no-wait`` as the owner, in this process
    (tests/support/command_in_process.py): the new request's id."""
    result = sandbridge("terminal", "request", "web", "--no-wait", *options, env=session.env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture
def dashboard(session: TerminalSession) -> Iterator[str]:
    ui = Process([*SANDBRIDGE, "ui", "--print-url"], env=session.env)
    url = ui.wait_line("http://")
    yield url
    assert ui.stop() == 0


def console_errors(page: Page) -> list[str]:
    """The page's console errors and uncaught exceptions, as they happen."""
    errors: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    page.on("console", on_console)
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


@pytest.fixture
def page(browser: Browser, dashboard: str) -> Iterator[Page]:
    context = browser.new_context()
    opened = context.new_page()
    errors = console_errors(opened)
    opened.goto(dashboard)
    expect(opened.locator("#status")).to_have_text("live")
    yield opened
    assert errors == [], f"console errors: {errors}"
    assert opened.title() == "sandbridge dashboard"
    context.close()


def test_the_page_lists_the_session_and_its_command(page: Page, session: TerminalSession) -> None:
    row = page.locator("#sessions tbody tr", has_text="web")
    expect(row).to_contain_text(str(session.work))
    expect(row).to_contain_text("sleep 600")
    expect(row).to_contain_text("allow")
    assert page.url.endswith("/"), "the token stays in the address bar"
    assert "token" not in page.url


def test_an_app_is_listed_copied_and_closed_from_the_page(browser: Browser, tmp_path: Path) -> None:
    session = TerminalSession(tmp_path, command=f"exec {PYTHON} {ECHO_APP} --register 4173")
    ui = Process([*SANDBRIDGE, "ui", "--print-url"], env=session.env)
    context = browser.new_context()
    try:
        context.grant_permissions(["clipboard-read", "clipboard-write"])
        opened = context.new_page()
        errors = console_errors(opened)
        opened.goto(ui.wait_line("http://"))
        row = opened.locator("#apps tbody tr", has_text="4173")
        expect(row).to_contain_text("shared")
        url = row.locator("code").inner_text()
        host_port = urllib.parse.urlsplit(url).port
        assert host_port is not None and port_is_open(host_port)
        row.get_by_role("button", name=f"Copy {url}").click()
        expect(opened.locator("#status")).to_have_text(f"copied {url}")
        assert opened.evaluate("navigator.clipboard.readText()") == url
        row.get_by_role("button", name="Close app web port 4173").click()
        expect(opened.locator("#apps tbody")).to_contain_text("none")
        assert not port_is_open(host_port)
        assert errors == []
    finally:
        context.close()
        ui.stop()
        session.stop()


def test_a_terminal_request_approved_from_the_page_attaches(
    page: Page, session: TerminalSession
) -> None:
    request_id = terminal_request(session, "--reason", "t")
    row = page.locator("#terminals tbody tr", has_text=request_id)
    expect(row).to_contain_text("pending")
    expect(row).to_contain_text("owner (you)")
    row.get_by_role("button", name=f"Approve terminal request {request_id}").click()
    expect(row).to_contain_text("approved")
    child = session.attach(request_id)
    child.expect(PROMPT)
    expect(row).to_contain_text("active")
    child.sendline("exit 3")
    assert finish(child)[0] == 3
    audit = sandbridge("terminal", "audit", "--json", env=session.env)
    assert audit.returncode == 0, audit.stderr
    admission = next(r for r in json.loads(audit.stdout) if r["event"] == "approval")
    assert admission["request"] == request_id


def test_a_hostile_reason_and_name_show_as_text(
    page: Page, session: TerminalSession, tmp_path: Path
) -> None:
    mallory = tmp_path / "mallory.key"
    public = keys.public_hex(keys.create_key(mallory))
    terminal_request(session, "--reason", "t")  # creates the owner key and its directory
    config = Path(session.env["XDG_CONFIG_HOME"]) / "sandbridge"
    (config / "requesters").write_text(f"{public}  # {HOSTILE}\n")
    request_id = terminal_request(session, "--key", str(mallory), "--reason", HOSTILE)
    row = page.locator("#terminals tbody tr", has_text=request_id)
    expect(row.locator("td").nth(4)).to_have_text(HOSTILE[: keys.MAX_NAME_CHARS])
    expect(row.locator("td").nth(5)).to_have_text(HOSTILE)
    assert page.locator("#terminals img, #terminals script").count() == 0
    row.get_by_role("button", name=f"Deny terminal request {request_id}").click()
    expect(row).to_contain_text("denied")


def test_a_refused_destination_appears_live_with_the_line_that_allows_it(
    page: Page, session: TerminalSession
) -> None:
    updated = page.evaluate("document.body.dataset.updated")
    tell(session.work / "go")
    row = page.locator("#egress tbody tr", has_text="blocked.example:80")
    expect(row).to_contain_text("refused")
    # the line the 403 itself named (port 80 is an entry's default)
    expect(row.locator("code")).to_have_text("blocked.example")
    assert page.evaluate("document.body.dataset.updated") != updated, "no reload, an update"
    expect(page.locator("#sessions tbody tr", has_text="web")).to_contain_text("1 refused")


def test_an_egress_request_allowed_once_from_the_page_answers_the_sandbox(
    page: Page, session: TerminalSession
) -> None:
    tell(session.work / "go")
    tell(session.work / "ask", HOSTILE)
    row = page.locator("#egress-pending tbody tr", has_text="asked.example:443")
    expect(row.locator("td").nth(3)).to_have_text(HOSTILE)
    row.get_by_role("button", name=re.compile("^Allow once: egress request")).click()
    deadline = time.monotonic() + 15
    asked = session.work / "asked"
    while not (asked.exists() and asked.read_text().endswith("\n")):
        assert time.monotonic() < deadline, "sandbridge-allow got no answer"
        select.select([], [], [], 0.05)
    assert asked.read_text() == "0\n", "sandbridge-allow was not approved"
    expect(page.locator("#egress-pending tbody")).to_contain_text("none")


def test_a_pending_request_shows_the_warning_the_owner_must_read(
    browser: Browser, tmp_path: Path
) -> None:
    # The host's loopback in IPv4-mapped IPv6 form: an address entry is taken at its word,
    # so approving it lets the proxy connect to the host's sshd. The owner's terminal
    # and `egress pending` say so; the page showed the address and the reason alone.
    command = (
        "sandbridge-allow '[::ffff:127.0.0.1]:22' --reason 'the package mirror' --no-wait; "
        "exec sleep 600"
    )
    session = TerminalSession(tmp_path, command=command)
    ui = Process([*SANDBRIDGE, "ui", "--print-url"], env=session.env)
    context = browser.new_context()
    try:
        opened = context.new_page()
        errors = console_errors(opened)
        opened.goto(ui.wait_line("http://"))
        row = opened.locator("#egress-pending tbody tr", has_text="the package mirror")
        expect(row.locator("td").nth(4)).to_contain_text(
            "is a loopback address: approving lets the proxy connect to it"
        )
        expect(row.locator("td.caution")).to_have_count(1)
        assert errors == []
    finally:
        context.close()
        ui.stop()
        session.stop()


# What Chromium logs as an error for a refused action (the dashboard answers 409).
CONFLICT = "Failed to load resource: the server responded with a status of 409 (Conflict)"


def _mirror_asker(tmp_path: Path) -> World:
    """A session (bwrap) in the test-made internet whose sandbox asks for mirror.test:80
    (192.0.2.3: not a global address, as a company mirror's), then fetches from it."""
    work = tmp_path / "work"
    (work / ".sandbridge").mkdir(parents=True)
    (work / ".sandbridge" / "allow").write_text(ALLOW_TEXT)
    (work / ".sandbridge" / "config").write_text("resolver = 127.0.0.1:5353\n")
    fifo = work / "go"
    os.mkfifo(fifo)
    # Short names: the runtime dir holds sockets (107 bytes to a path at most).
    places = {"XDG_RUNTIME_DIR": "xdg", "XDG_CONFIG_HOME": "config", "XDG_STATE_HOME": "state"}
    env = {**os.environ, **{name: str(tmp_path / short) for name, short in places.items()}}
    for short in places.values():
        (tmp_path / short).mkdir(mode=0o700)
    steps = [
        ["ask", "ask", "mirror.test:80", "--reason", "the company's package mirror"],
        ["fetch", "after", "http://mirror.test/m1"],
    ]
    argv = run_argv(
        work, PYTHON, ASKER, str(fifo), json.dumps(steps), options=("--backend", "bwrap")
    )
    return World(in_world(argv, env), env, fifo, work)


def test_a_mirror_name_refused_as_plain_is_granted_from_the_page_as_private(
    browser: Browser, tmp_path: Path
) -> None:
    # The proxy refuses every connection to a name of non-global addresses only unless its
    # grant says private: the session refuses the plain grant (needs_private), and the page
    # offered nothing else than that refusal's text, which named a CLI command.
    world = _mirror_asker(tmp_path)
    ui = Process([*SANDBRIDGE, "ui", "--print-url"], env=world.env)
    context = browser.new_context()
    try:
        request_id = world.asked("mirror.test:80")
        page = context.new_page()
        errors = console_errors(page)
        page.goto(ui.wait_line("http://"))
        row = page.locator("#egress-pending tbody tr", has_text=request_id)
        expect(row.locator("td").nth(4)).to_have_text("—")
        expect(row.get_by_role("button", name=re.compile("as private"))).to_have_count(0)
        plain = row.get_by_role(
            "button", name=f"Allow for the session: egress request {request_id}"
        )
        expect(plain).not_to_have_attribute("aria-disabled", "true")
        plain.click()
        expect(page.locator("#status")).to_have_text(
            f"not approved: {request_id} can only be granted as private (its row says why)"
        )
        caution = row.locator("td.caution")
        expect(caution).to_contain_text(
            "WARNING: mirror.test resolves to 192.0.2.3 (private) and no global address"
        )
        expect(caution).to_contain_text(
            "lets the proxy connect the name to whatever address its DNS gives, this host's "
            "loopback included"
        )
        expect(row.get_by_role("button")).to_have_text(
            ["Allow once as private", "Allow for the session as private",
             "Allow and save as private", "Deny"]
        )  # fmt: skip
        [pending] = json.loads(world.egress("pending", "--json").stdout)
        assert pending["id"] == request_id, "the refused grant left the request pending"
        private = row.get_by_role(
            "button", name=f"Allow for the session as private: egress request {request_id}"
        )
        expect(private).not_to_have_attribute("aria-disabled", "true")
        private.click()
        expect(page.locator("#status")).to_have_text(
            f"approved {request_id}: mirror.test:80 private, until the session ends"
        )
        expect(page.locator("#egress-pending tbody")).to_contain_text("none")
        stderr = world.finish()
        assert errors == [CONFLICT]  # the plain grant's refusal: Chromium logs a 409
    finally:
        context.close()
        ui.stop()
        if world.process.popen.poll() is None:
            world.process.stop()
    assert (
        f"sandbridge: egress request {request_id} approved (session): mirror.test:80 private"
        in (stderr)
    )
    steps = {line.split(" ", 2)[1]: line.split(" ", 2)[2] for line in world.process.lines["stdout"]
             if line.startswith("STEP ")}  # fmt: skip
    assert json.loads(steps["ask"])["rc"] == 0, steps["ask"]
    assert steps["after"].startswith("status=200"), steps["after"]
    assert sum(line.startswith("HIT mirror80 ") for line in stderr) == 1


def test_stopping_a_session_from_the_page_by_keyboard_asks_then_ends_its_sandbox(
    page: Page, session: TerminalSession
) -> None:
    sandboxed = session.wait_for("cat go > /dev/null")
    # by keyboard: Tab through the page to the button, then Enter
    for _ in range(20):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.getAttribute('aria-label')") == "Stop session web":
            break
    else:
        raise AssertionError("Tab never reached the Stop button")
    page.keyboard.press("Enter")
    # Nothing is sent yet: the row asks, and the focus is on its answer.
    row = page.locator("#sessions tbody tr", has_text="web")
    expect(row).to_contain_text("End this session and its sandbox?")
    assert page.evaluate("document.activeElement.getAttribute('aria-label')") == (
        "Confirm stop session web"
    )
    assert session.process.popen.poll() is None, "stopped before the owner confirmed"
    page.keyboard.press("Enter")
    assert session.process.popen.wait(30) == 128 + 15
    # The terminal the session ran on says why it ended.
    session.process.wait_line("sandbridge: session web was stopped by its owner", "stderr")
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in sandboxed):
        assert time.monotonic() < deadline, "the sandbox outlived its session"
        select.select([], [], [], 0.05)
    expect(page.locator("#sessions tbody")).to_contain_text("none")


class ScriptedDashboard:
    """The page's own server (``ui/server.py``) in a thread of its own, over tables the test
    sets: what a hostile session or far machine could make them, at the moment it picks."""

    def __init__(
        self,
        tables: dict[str, list[dict[str, object]]],
        answer: Callable[[dict[str, object]], dict[str, object]] = lambda body: {},
    ) -> None:
        self.tables = tables
        self.actions: list[dict[str, object]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

        async def snapshot() -> dict[str, object]:
            copied: dict[str, object] = json.loads(json.dumps(self.tables))
            return copied

        def action(body: dict[str, object]) -> dict[str, object]:
            self.actions.append(body)
            return answer(body)

        self.server = ServedDashboard(snapshot, action, refresh=3600.0)
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(10)
        self.url = asyncio.run_coroutine_threadsafe(self._login_url(), self._loop).result(10)

    async def _login_url(self) -> str:
        return self.server.login_url()

    def change(self, tables: dict[str, list[dict[str, object]]]) -> None:
        self.tables = tables
        self._loop.call_soon_threadsafe(self.server.notify)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def _tables(**rows: list[dict[str, object]]) -> dict[str, list[dict[str, object]]]:
    """Empty tables but for ``rows``."""
    names = ("sessions", "apps", "terminals", "egress", "egress_pending", "logins")
    return {name: rows.get(name, []) for name in names}


SESSION: dict[str, object] = {
    "id": "web", "machine": None, "workdir": "/home/owner/project", "command": "sleep 600",
    "started": time.time(), "network": "allow", "egress": None, "controllable": True,
}  # fmt: skip


def test_stop_sends_nothing_until_confirmed_and_cancel_keeps_the_session(
    browser: Browser,
) -> None:
    served = ScriptedDashboard(_tables(sessions=[SESSION]))
    context = browser.new_context()
    try:
        page = context.new_page()
        errors = console_errors(page)
        page.goto(served.url)
        stop = page.get_by_role("button", name="Stop session web")
        confirm = page.get_by_role("button", name="Confirm stop session web")
        cancel = page.get_by_role("button", name="Cancel stop session web")
        stop.click()
        expect(confirm).to_be_visible()
        # The answer just appeared under the pointer: a double click does not confirm.
        expect(confirm).not_to_have_attribute("aria-disabled", "true")
        cancel.click()
        expect(page.locator("#status")).to_have_text("web keeps running")
        expect(confirm).to_have_count(0)
        assert served.actions == []
        expect(stop).not_to_have_attribute("aria-disabled", "true")
        stop.click()
        expect(confirm).not_to_have_attribute("aria-disabled", "true")
        confirm.click()
        expect(page.locator("#status")).to_have_text("stopping web")
        assert served.actions == [{"action": "stop", "session": "web"}]
        assert errors == []
    finally:
        context.close()
        served.close()


def _request(state: str, **fields: object) -> dict[str, object]:
    return {
        "id": f"web:{state}", "session": "web", "machine": None, "state": state,
        "requester": "ab" * 32, "name": None, "reason": "look", "created": 1.7e9,
        "duration": None, "expires": None, "ended": None, **fields,
    }  # fmt: skip


def test_a_finished_terminal_request_shows_its_end_not_its_approval(browser: Browser) -> None:
    # 10:00:00 and 10:10:00 local time of the page (timezone_id below)
    at, until = 1796637600.0, 1796638200.0
    rows = [
        _request("approved", expires=until),
        _request("ended", expires=until, ended=at),
        _request("revoked", expires=until, ended=at),
        _request("denied", ended=at),
        _request("pending"),
        {**_request("ended", expires=until), "id": "box:web:far", "machine": "box"},
    ]
    served = ScriptedDashboard(_tables(terminals=rows))
    context = browser.new_context(timezone_id="UTC", locale="en-GB")
    try:
        page = context.new_page()
        page.goto(served.url)
        expect(page.locator("#status")).to_have_text("live")
        shown = page.locator("#terminals tbody tr td:nth-child(8)").all_inner_texts()
        assert shown == [
            "until 10:10:00", "ended 10:00:00", "revoked 10:00:00", "denied 10:00:00", "—",
            "ended",
        ]  # fmt: skip
        header = page.locator("#terminals thead th:nth-child(8)")
        expect(header).to_have_text("Approved until / ended")
    finally:
        context.close()
        served.close()


def test_access_says_what_shared_and_private_mean(browser: Browser) -> None:
    app = {"session": "web", "port": 5173, "process": "node", "machine": None, "host_port": 41000}
    apps = [
        {**app, "url": "http://a.localhost:41000/", "private": False},
        {**app, "url": "http://b.localhost:41001/", "private": True, "host_port": 41001},
    ]
    served = ScriptedDashboard(_tables(apps=apps))
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(served.url)
        # The tables fill once the page's script has the state: wait for both rows (all()
        # takes what is there at once, which was nothing in one clean-clone run).
        cells = page.locator("#apps tbody tr td:nth-child(5)")
        expect(cells).to_have_count(2)
        shared, private = cells.all()
        expect(shared).to_have_text(
            "shared (no token: any browser or program of yours with the URL opens it; "
            "other users are refused)"
        )
        expect(shared).to_have_attribute("title", re.compile("^no token: any browser"))
        expect(private).to_have_text(
            "private (a one-time token in the URL, then only the browser that used it)"
        )
    finally:
        context.close()
        served.close()


def test_a_logins_callback_is_listed_with_its_state(browser: Browser) -> None:
    login: dict[str, object] = {
        "session": "web", "callback": "http://127.0.0.1:38119/callback",
        "authorize_host": "auth.example.com", "state": "waiting",
    }  # fmt: skip
    served = ScriptedDashboard(_tables(logins=[login]))
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(served.url)
        expect(page.locator("#status")).to_have_text("live")
        cells = page.locator("#logins tbody tr td").all_inner_texts()
        assert cells == ["web", "http://127.0.0.1:38119/callback", "auth.example.com", "waiting"]
    finally:
        context.close()
        served.close()


# Every piece of text in the tables whose rendering spans more than one line box: a
# token (a run without white space) broken inside. Ranges over each token of each text
# node; a token on one line has all its boxes on one line.
BROKEN_TOKENS = """() => {
  const broken = [];
  const walker = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const match of node.data.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
      if (tops.size > 1) broken.push(match[0]);
    }
  }
  return broken;
}"""


def test_at_700_px_tables_scroll_sideways_and_no_token_is_broken(browser: Browser) -> None:
    long_dir = "/home/owner/src/" + "a-rather-long-project-directory-name/" * 3
    url = "http://k7x2m3pdz6eq4aabbccddeeff0011223344.localhost:43125/some/long/path"
    served = ScriptedDashboard(
        _tables(
            sessions=[{**SESSION, "workdir": long_dir, "command": f"npm run dev -- {long_dir}"}],
            apps=[{"session": "web", "port": 5173, "process": "node", "machine": None,
                   "host_port": 43125, "url": url, "private": False}],
            terminals=[_request("pending", requester="0123456789abcdef" * 4, reason="a b c")],
        )
    )  # fmt: skip
    context = browser.new_context(viewport={"width": 700, "height": 900})
    try:
        page = context.new_page()
        page.goto(served.url)
        expect(page.locator("#status")).to_have_text("live")
        assert page.evaluate(BROKEN_TOKENS) == []
        # The tables are wider than the window: each one's wrapper scrolls, not the page.
        wrapper = page.locator("div.scroll:has(#apps)")
        assert wrapper.evaluate("w => w.scrollWidth > w.clientWidth")
        assert wrapper.evaluate("w => getComputedStyle(w).overflowX") == "auto"
        assert page.evaluate("document.documentElement.scrollWidth") <= 700
    finally:
        context.close()
        served.close()


def _asking(*requests: tuple[str, str]) -> dict[str, list[dict[str, object]]]:
    """Tables with these egress requests (session, destination) waiting for the owner."""
    pending: list[dict[str, object]] = [
        {"session": s, "id": f"{s}:{d[:8]}", "destination": d, "reason": "r", "caution": None}
        for s, d in requests
    ]
    return {"sessions": [], "apps": [], "terminals": [], "egress": [], "egress_pending": pending}


def test_a_row_inserted_under_the_pointer_is_not_clicked_for_the_owner(browser: Browser) -> None:
    # The owner points at session b's request; session a (listed first) asks for egress at
    # that moment: its row pushes b's down, and the click landed on a's "Allow once".
    served = ScriptedDashboard(_asking(("b", "good.example:443")))
    context = browser.new_context()
    try:
        page = context.new_page()
        errors = console_errors(page)
        # The page's clock, so that the click lands inside the new row's settling time
        # however slow the machine is: it runs as the real one until paused below.
        page.clock.install(time=time.time() - 60)
        page.goto(served.url)
        good = page.get_by_role("button", name="Allow once: egress request b:good.exa")
        expect(good).not_to_have_attribute("aria-disabled", "true")  # settled
        # In the window, as the owner sees it (the tables above may push it below).
        good.scroll_into_view_if_needed()
        box = good.bounding_box()
        assert box is not None
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.move(x, y)
        updated = page.evaluate("document.body.dataset.updated")
        # No time passes for the page from here to the click (the update still comes).
        page.clock.pause_at(time.time())
        served.change(_asking(("a", "evil.example:443"), ("b", "good.example:443")))
        expect(page.locator("body")).not_to_have_attribute("data-updated", updated)
        evil = page.get_by_role("button", name="Allow once: egress request a:evil.exa")
        evil_box = evil.bounding_box()
        assert evil_box is not None and evil_box["y"] <= y <= evil_box["y"] + evil_box["height"]
        page.mouse.click(x, y)  # the owner's click, meant for b's request
        expect(page.locator("#status")).not_to_have_text("live")  # the click was handled
        assert served.actions == [], "a row that had just appeared took the owner's click"
        expect(page.locator("#status")).to_contain_text("was not done; click again")
        # Once it has stayed put, the button under the pointer is the owner's to click.
        page.clock.resume()
        expect(evil).not_to_have_attribute("aria-disabled", "true")
        good.click()
        expect(page.locator("#status")).to_have_text("approved b:good.exa")
        assert [a["id"] for a in served.actions] == ["b:good.exa"]
        assert errors == []
    finally:
        context.close()
        served.close()


def test_only_a_row_its_session_refused_as_plain_offers_the_grant_as_private(
    browser: Browser,
) -> None:
    # The page sends private only for a request its session said needs it; the refusal's
    # words are the session's, so they are shown as text.
    refusal = f"a.test resolves to 10.0.0.8 (private) and no global address {HOSTILE}"

    def answer(body: dict[str, object]) -> dict[str, object]:
        if body["id"] == "a:a.test:4" and body.get("private") is not True:
            raise ControlError("needs_private", refusal)
        if body["id"] == "b:b.test:4":
            raise ControlError("not_pending", "egress request b:b.test:4 is expired")
        return {"id": body["id"], "state": "approved", "scope": body["scope"],
                "destination": "a.test:443 private", "saved": "/p/.sandbridge/allow"}  # fmt: skip

    served = ScriptedDashboard(_asking(("a", "a.test:443"), ("b", "b.test:443")), answer)
    context = browser.new_context()
    try:
        page = context.new_page()
        errors = console_errors(page)
        page.goto(served.url)
        a_row = page.locator("#egress-pending tbody tr", has_text="a:a.test:4")
        b_row = page.locator("#egress-pending tbody tr", has_text="b:b.test:4")
        b_once = b_row.get_by_role("button", name="Allow once: egress request b:b.test:4")
        expect(b_once).not_to_have_attribute("aria-disabled", "true")
        b_once.click()
        expect(page.locator("#status")).to_have_text(
            "refused: egress request b:b.test:4 is expired"
        )
        a_once = a_row.get_by_role("button", name="Allow once: egress request a:a.test:4")
        expect(a_once).not_to_have_attribute("aria-disabled", "true")
        a_once.click()
        expect(a_row.locator("td.caution")).to_have_text(f"WARNING: {refusal}")
        assert page.locator("#egress-pending img, #egress-pending script").count() == 0
        expect(page.get_by_role("button", name=re.compile("as private"))).to_have_count(3)
        expect(b_row.get_by_role("button", name=re.compile("as private"))).to_have_count(0)
        # The new buttons sit where the plain ones were: a second click is not a grant.
        assert page.evaluate("document.activeElement.getAttribute('aria-label')") == (
            "Deny egress request a:a.test:4"
        )
        save = a_row.get_by_role(
            "button", name="Allow and save as private: egress request a:a.test:4"
        )
        expect(save).not_to_have_attribute("aria-disabled", "true")
        save.click()
        expect(page.locator("#status")).to_have_text(
            "approved a:a.test:4: a.test:443 private, until the session ends; "
            "saved to /p/.sandbridge/allow"
        )
        sent = [(a["id"], a["scope"], a["save"], a["private"]) for a in served.actions]
        assert sent == [
            ("b:b.test:4", "once", False, False),
            ("a:a.test:4", "once", False, False),
            ("a:a.test:4", "session", True, True),
        ]
        assert errors == [CONFLICT] * 2  # the two refusals: Chromium logs each 409
    finally:
        context.close()
        served.close()


def _impostor(
    port: int, tables: dict[str, list[dict[str, object]]], heads: list[bytes]
) -> socket.socket:
    """Another local user's listener on a port the dashboard left: every request (its
    first bytes kept in ``heads``) gets an event stream of ``tables`` (it knows the page's
    format, not its secrets)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen()

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = server.accept()
                heads.append(connection.recv(65536))
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
                    b"data: " + json.dumps(tables).encode() + b"\n\n"
                )

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_a_tab_whose_dashboard_ended_shows_no_other_listeners_tables(browser: Browser) -> None:
    # The tab reconnects its event stream to its dashboard's name and port; once the
    # dashboard has ended (a daemon restart), any local user can listen on that port, and
    # the tab showed whatever rows that listener sent as the owner's.
    served = ScriptedDashboard(_asking(("b", "good.example:443")))
    context = browser.new_context()
    impostor = None
    heads: list[bytes] = []
    try:
        page = context.new_page()
        page.goto(served.url)
        expect(page.locator("#status")).to_have_text("live")
        port = served.server.port
        served.close()
        expect(page.locator("#status")).to_contain_text("connection lost")
        impostor = _impostor(port, _asking(("web", "evil.example:443")), heads)
        expect(page.locator("#status")).to_contain_text("this dashboard has ended")
        expect(page.locator("#egress-pending tbody")).not_to_contain_text("evil.example")
        # The rows left from the dashboard act no more: nothing is sent to the listener.
        page.get_by_role("button", name="Deny egress request b:good.exa").click(force=True)
        expect(page.locator("#status")).to_have_text(
            "this dashboard has ended: run `sandbridge ui` again"
        )
        assert [head for head in heads if head.startswith(b"POST")] == []
    finally:
        context.close()
        if impostor is not None:
            impostor.close()
