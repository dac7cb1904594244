"""The dashboard the daemon serves, in Debian's Chromium through Playwright, over a
session the daemon serves: what the owner does on the page reaches the session, and what
happens in the session reaches the page, from the daemon's own events."""

from __future__ import annotations

import contextlib
import os
import select
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.conftest import ECHO_APP, PYTHON, port_is_open, start_daemon
from tests.daemon.test_dashboard import ui_url
from tests.e2e.test_dashboard import COMMAND, console_errors
from tests.terminals.harness import PROMPT, TerminalSession, finish


@contextlib.contextmanager
def daemon_session(tmp_path: Path, command: str) -> Iterator[TerminalSession]:
    """A session named ``web`` running ``command`` that the daemon (started first, with
    the session's dirs) serves."""
    (tmp_path / "xdg").mkdir(mode=0o700)
    env = {  # the dirs TerminalSession gives its session
        **os.environ,
        "XDG_RUNTIME_DIR": str(tmp_path / "xdg"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    daemon = start_daemon(env=env)
    running = TerminalSession(tmp_path, command=command)
    try:
        daemon.wait_line("sandbridge: daemon.session ", "stderr")
        yield running
    finally:
        running.stop()
        daemon.stop()


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TerminalSession]:
    """One daemon and session for the tests that each work on terminal requests of their
    own and leave the session's command where it is."""
    with daemon_session(tmp_path_factory.mktemp("daemon-dashboard"), COMMAND) as running:
        yield running


@pytest.fixture
def own_session(tmp_path: Path) -> Iterator[TerminalSession]:
    """A daemon and session of its own, for a test that moves the session's command on or
    ends the session."""
    with daemon_session(tmp_path, COMMAND) as running:
        yield running


@contextlib.contextmanager
def live_page(browser: Browser, session: TerminalSession) -> Iterator[Page]:
    context = browser.new_context()
    opened = context.new_page()
    errors = console_errors(opened)
    opened.goto(ui_url(session.env))
    expect(opened.locator("#status")).to_have_text("live")
    yield opened
    assert errors == [], f"console errors: {errors}"
    assert opened.title() == "sandbridge dashboard"
    context.close()


@pytest.fixture
def page(browser: Browser, session: TerminalSession) -> Iterator[Page]:
    with live_page(browser, session) as opened:
        yield opened


@pytest.fixture
def own_page(browser: Browser, own_session: TerminalSession) -> Iterator[Page]:
    with live_page(browser, own_session) as opened:
        yield opened


def approvals(session: TerminalSession) -> list[dict[str, object]]:
    return [r for r in session.audit() if r["event"] == "approval"]


def test_the_page_loads_and_lists_the_daemons_session(page: Page, session: TerminalSession) -> None:
    row = page.locator("#sessions tbody tr", has_text="web")
    expect(row).to_contain_text(str(session.work))
    # (the daemon gets the command cut to a bounded length: options_wire.py)
    expect(row).to_contain_text("sh -c while [ ! -e go ]")
    assert "token" not in page.url


def test_a_requested_duration_is_shown_and_approve_signs_for_it_and_attaches(
    page: Page, session: TerminalSession
) -> None:
    request_id = session.cli(
        "terminal", "request", "web", "--no-wait", "--reason", "look", "--duration", "2m"
    ).stdout.strip()
    row = page.locator("#terminals tbody tr", has_text=request_id)
    expect(row).to_contain_text("pending")
    expect(row.locator("td").nth(6)).to_have_text("2 min")
    before = approvals(session)
    # "as asked" is the default: Approve signs for the 2 minutes the request asked
    row.get_by_role("button", name=f"Approve terminal request {request_id}").click()
    expect(page.locator("#status")).to_have_text(f"approved {request_id} for 2 min")
    expect(row).to_contain_text("approved")
    (approval,) = [r for r in approvals(session) if r not in before]
    assert approval["request"] == request_id and approval["ttl"] == 120
    child = session.attach(request_id)
    child.expect(PROMPT)
    expect(row).to_contain_text("active")
    child.sendline("exit 3")
    assert finish(child)[0] == 3
    expect(row).to_contain_text("ended")


def test_the_owner_may_approve_for_another_duration_than_asked(
    page: Page, session: TerminalSession
) -> None:
    request_id = session.cli(
        "terminal", "request", "web", "--no-wait", "--duration", "1h"
    ).stdout.strip()
    row = page.locator("#terminals tbody tr", has_text=request_id)
    expect(row.locator("td").nth(6)).to_have_text("1 h")
    page.locator("#ttl").select_option("300")
    before = approvals(session)
    row.get_by_role("button", name=f"Approve terminal request {request_id}").click()
    expect(page.locator("#status")).to_have_text(f"approved {request_id} for 5 min")
    expect(row).to_contain_text("approved")
    (approval,) = [r for r in approvals(session) if r not in before]
    assert approval["request"] == request_id and approval["ttl"] == 300


def test_a_refusal_appears_live(own_page: Page, own_session: TerminalSession) -> None:
    page, session = own_page, own_session
    updated = page.evaluate("document.body.dataset.updated")
    (session.work / "go").touch()
    row = page.locator("#egress tbody tr", has_text="blocked.example:80")
    expect(row).to_contain_text("refused")
    expect(row.locator("code")).to_have_text("blocked.example")
    assert page.evaluate("document.body.dataset.updated") != updated, "no reload, an update"
    expect(page.locator("#sessions tbody tr", has_text="web")).to_contain_text("1 refused")


def test_stopping_the_session_from_the_page_asks_then_ends_its_sandbox(
    own_page: Page, own_session: TerminalSession
) -> None:
    page, session = own_page, own_session
    sandboxed = session.wait_for("while [ ! -e go ]")
    page.get_by_role("button", name="Stop session web").click()
    confirm = page.get_by_role("button", name="Confirm stop session web")
    expect(confirm).not_to_have_attribute("aria-disabled", "true")
    assert session.process.popen.poll() is None, "stopped before the owner confirmed"
    confirm.click()
    assert session.process.popen.wait(30) == 128 + 15
    # The thin client's terminal says why its session ended.
    session.process.wait_line("sandbridge: session web was stopped by its owner", "stderr")
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in sandboxed):
        assert time.monotonic() < deadline, "the sandbox outlived its session"
        select.select([], [], [], 0.05)
    expect(page.locator("#sessions tbody")).to_contain_text("none")


def test_a_second_sandbridge_ui_gets_its_own_url_and_the_first_tab_stays_live(
    page: Page, session: TerminalSession, browser: Browser
) -> None:
    context = browser.new_context()
    try:
        other = context.new_page()
        other.goto(ui_url(session.env))
        expect(other.locator("#status")).to_have_text("live")
        request_id = session.request()
        for opened in (page, other):
            expect(opened.locator("#terminals tbody")).to_contain_text(request_id)
    finally:
        context.close()


def test_a_used_url_is_refused_in_the_browser(browser: Browser, session: TerminalSession) -> None:
    url = ui_url(session.env)
    context = browser.new_context()
    try:
        first = context.new_page()
        first.goto(url)
        expect(first.locator("#status")).to_have_text("live")
        stranger = browser.new_context()  # no cookie: another browser profile
        replay = stranger.new_page().goto(url)
        assert replay is not None and replay.status == 403
        stranger.close()
    finally:
        context.close()


def test_an_app_registered_is_listed_live_and_closed_from_the_page(
    browser: Browser, tmp_path: Path
) -> None:
    command = f"while [ ! -e go ]; do sleep 0.05; done; exec {PYTHON} {ECHO_APP} --register 4173"
    with daemon_session(tmp_path, command) as session:
        context = browser.new_context()
        try:
            opened = context.new_page()
            errors = console_errors(opened)
            opened.goto(ui_url(session.env))
            expect(opened.locator("#status")).to_have_text("live")
            expect(opened.locator("#apps tbody")).to_contain_text("none")
            (session.work / "go").touch()
            row = opened.locator("#apps tbody tr", has_text="4173")
            expect(row).to_contain_text("shared")
            url = row.locator("code").inner_text()
            host_port = urllib.parse.urlsplit(url).port
            assert host_port is not None and port_is_open(host_port)
            row.get_by_role("button", name="Close app web port 4173").click()
            expect(opened.locator("#apps tbody")).to_contain_text("none")
            assert not port_is_open(host_port)
            assert errors == []
        finally:
            context.close()
