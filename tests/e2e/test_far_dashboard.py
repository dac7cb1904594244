"""Far sessions on the dashboard, in Debian's Chromium through Playwright: a far machine
(``sandbridge host`` with a terminal-serving "container", its own XDG dirs) reached by
the laptop's ``sandbridge connect --via`` to its ``serve-stdio``, and the laptop's
``sandbridge ui`` (the laptop's own dirs and owner key). The far sessions and their
terminal requests reach the page as the link reports them; an approval clicked on the
page is signed on the laptop and admitted on the far machine."""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.apps.hostile_far import MARKUP
from tests.conftest import PYTHON, SANDBRIDGE, Process
from tests.e2e.test_dashboard import console_errors
from tests.remote.test_terminal_relay import HOSTILE_FAR, FarMachine, LaptopUser, laptop_of
from tests.terminals.harness import PROMPT, attach_child, finish


@contextlib.contextmanager
def dashboard_of(browser: Browser, laptop: LaptopUser) -> Iterator[tuple[Page, list[str]]]:
    """The laptop's ``sandbridge ui`` (served by itself: the laptop runs no daemon),
    open and live in a new browser context; the page's console errors."""
    ui = Process([*SANDBRIDGE, "ui", "--print-url"], env=laptop.env)
    context = browser.new_context()
    try:
        page = context.new_page()
        errors = console_errors(page)
        page.goto(ui.wait_line("http://"))
        expect(page.locator("#status")).to_have_text("live")
        yield page, errors
        assert page.title() == "sandbridge dashboard"
    finally:
        context.close()
        ui.stop()


@dataclass
class Shown:
    """A far machine, the laptop connected to it and the laptop's dashboard, live."""

    far: FarMachine
    laptop: LaptopUser
    page: Page
    errors: list[str]


@pytest.fixture(scope="module")
def shown(browser: Browser, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shown]:
    """One far machine, link and page for the tests that each act on a terminal request
    of their own (each asserts on its own request's row, status and audit)."""
    tmp_path = tmp_path_factory.mktemp("far-dashboard")
    with pytest.MonkeyPatch.context() as monkeypatch:  # the far user's dirs: this process's
        far = FarMachine(tmp_path, monkeypatch)
        try:
            with (
                laptop_of(tmp_path, far.serve_stdio) as laptop,
                dashboard_of(browser, laptop) as (page, errors),
            ):
                yield Shown(far, laptop, page, errors)
        finally:
            far.stop()


def test_a_far_session_is_listed_beside_local_ones_marked_with_its_machine(shown: Shown) -> None:
    page, errors = shown.page, shown.errors
    row = page.locator("#sessions tbody tr", has_text="far:box")
    expect(row).to_be_visible()
    expect(row.locator("td").nth(1)).to_have_text("far")
    # The link carries terminal ops only: no Stop here, and the page says why.
    expect(row).not_to_contain_text("Stop")
    expect(row.locator("td").last).to_have_text("not from here")
    assert "sandbridge stop there" in str(row.locator("td").last.get_attribute("title"))
    assert errors == []


def test_a_far_terminal_request_appears_live_is_approved_from_the_page_and_attaches(
    shown: Shown,
) -> None:
    far, laptop, page, errors = shown.far, shown.laptop, shown.page, shown.errors
    trusted = far.cli("terminal", "trust-owner", laptop.owner_public_key())
    assert trusted.returncode == 0, trusted.stderr
    expect(page.locator("#sessions tbody tr", has_text="far:box")).to_be_visible()
    asked = laptop.cli(
        "terminal", "request", "far:box", "--no-wait", "--reason", "from the page",
        "--duration", "5m",
    )  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    request_id = asked.stdout.strip()
    row = page.locator("#terminals tbody tr", has_text=request_id)
    # Shown without a reload: the far side's description, through connect's record.
    expect(row).to_contain_text("pending")
    expect(row).to_contain_text("from the page")
    expect(row).to_contain_text("owner (you)")
    expect(row).to_contain_text("5 min")
    expect(row.locator("td").nth(1)).to_have_text("far")
    row.get_by_role("button", name=f"Approve terminal request {request_id}").click()
    expect(page.locator("#status")).to_have_text(f"approved {request_id} for 5 min")
    expect(row).to_contain_text("approved")
    child = attach_child(laptop.env, request_id)
    child.expect(PROMPT)
    child.sendline("echo FROM-$((40+2))")
    child.expect("FROM-42")
    expect(row).to_contain_text("active")
    child.sendline("exit 3")
    status, output = finish(child)
    assert status == 3, output
    # Admitted on the far machine, under the laptop's key, as the CLI's approval is.
    events = {r["event"]: r for r in far.audit_after_end(request_id.removeprefix("far:"))}
    assert events["approval"]["owner"] == laptop.owner_public_key()
    assert events["end"]["end"] == "exit"
    assert errors == []


def test_a_far_request_is_denied_from_the_page_on_the_far_machine(shown: Shown) -> None:
    far, laptop, page, errors = shown.far, shown.laptop, shown.page, shown.errors
    far.cli("terminal", "trust-owner", laptop.owner_public_key())
    asked = laptop.cli("terminal", "request", "far:box", "--no-wait", "--reason", "no")
    assert asked.returncode == 0, asked.stderr
    request_id = asked.stdout.strip()
    row = page.locator("#terminals tbody tr", has_text=request_id)
    row.get_by_role("button", name=f"Deny terminal request {request_id}").click()
    expect(page.locator("#status")).to_have_text(f"denied {request_id}")
    expect(row).to_contain_text("denied")
    listing = laptop.cli("terminal", "list", "far:box").stdout
    assert f"{request_id}  denied" in listing
    assert errors == []


def test_a_far_approval_is_revoked_from_the_page_on_the_far_machine(shown: Shown) -> None:
    far, laptop, page, errors = shown.far, shown.laptop, shown.page, shown.errors
    far.cli("terminal", "trust-owner", laptop.owner_public_key())
    asked = laptop.cli("terminal", "request", "far:box", "--no-wait")
    request_id = asked.stdout.strip()
    assert laptop.cli("terminal", "approve", request_id).returncode == 0
    row = page.locator("#terminals tbody tr", has_text=request_id)
    row.get_by_role("button", name=f"Revoke terminal request {request_id}").click()
    expect(page.locator("#status")).to_have_text(f"revoked {request_id}")
    expect(row).to_contain_text("revoked")
    events = [r["event"] for r in far.audit(request_id.removeprefix("far:"))]
    assert "revocation" in events
    assert errors == []


def test_a_hostile_far_machines_words_are_shown_as_text(browser: Browser, tmp_path: Path) -> None:
    laptop = LaptopUser(tmp_path, shlex.join([PYTHON, str(HOSTILE_FAR), "describe"]))
    try:
        with dashboard_of(browser, laptop) as (page, errors):
            session = page.locator("#sessions tbody tr", has_text="far:evil")
            expect(session).to_contain_text(f"/w/{MARKUP}")
            expect(session).to_contain_text(f"sh -c {MARKUP}")
            request = page.locator("#terminals tbody tr", has_text="far:evil:0123abcd")
            expect(request).to_contain_text(MARKUP)
            # Its machine is the laptop's name for it, whatever the far side says.
            expect(request.locator("td").nth(1)).to_have_text("far")
            assert page.locator("main img, main b").count() == 0
            assert errors == []
    finally:
        laptop.stop()


def test_a_far_machine_listing_another_sessions_request_is_cut_off(tmp_path: Path) -> None:
    laptop = LaptopUser(tmp_path, shlex.join([PYTHON, str(HOSTILE_FAR), "foreign"]))
    try:
        line = laptop.connect.process.wait_line("sandbridge: far: link lost", "stderr")
        assert "a request id must be evil:XXXXXXXX, got 'other:0123abcd'" in line
        listed = laptop.cli("ls", "--json")
        assert "other:0123abcd" not in listed.stdout
    finally:
        laptop.stop()
