"""Debian's Chromium, driven by Playwright, uses a sandboxed app through its host origin.

Every feature is asserted in the page itself (DOM state written by the app's scripts),
once with the app at ``/`` and once under the base path ``/app``. A screenshot of each
run is saved under ``test-artifacts/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from tests.conftest import REPO, request
from tests.e2e.features import FeatureSession, feature_session
from tests.remote.test_connect import Laptop, _serve_stdio_pids, far_machine

ARTIFACTS = REPO / "test-artifacts"
UPLOAD_BYTES = 20 * 1024 * 1024


@pytest.fixture(scope="module", params=["/", "/app"], ids=["root", "base-path"])
def session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FeatureSession]:
    with feature_session(tmp_path_factory.mktemp("browser"), request.param) as running:
        yield running


@contextmanager
def opened_page(browser: Browser, session: FeatureSession) -> Iterator[Page]:
    context = browser.new_context()
    opened = context.new_page()
    opened.goto(session.url)
    yield opened
    context.close()


@pytest.fixture(scope="module")
def loaded(browser: Browser, session: FeatureSession) -> Iterator[Page]:
    """The app's page, loaded once per session, for the tests that each read one feature's
    result from it (each feature runs once per load, whichever test reads it)."""
    with opened_page(browser, session) as opened:
        yield opened


@pytest.fixture
def page(browser: Browser, session: FeatureSession) -> Iterator[Page]:
    """A page of its own, for a test that leaves the page (a form post)."""
    with opened_page(browser, session) as opened:
        yield opened


def result(page: Page, element: str) -> str:
    locator = page.locator(f"#{element}[data-done='1']")
    locator.wait_for(timeout=15_000)
    return locator.inner_text()


def test_root_absolute_module_css_and_image(loaded: Page, session: FeatureSession) -> None:
    assert result(loaded, "module") == "loaded /static/util.js"
    assert result(loaded, "css") == "rgb(12, 34, 56)"
    assert result(loaded, "image-size") == "40x30"


def test_fetch(loaded: Page, session: FeatureSession) -> None:
    assert result(loaded, "fetch") == f"{session.base}/api/hello?x=1"


def test_websocket_echo_subprotocol_and_close(loaded: Page) -> None:
    assert result(loaded, "ws") == "protocol=chat.v1 text=hello binary=1048576 close=4001 bye"


def test_event_source_reconnects_with_last_event_id(loaded: Page) -> None:
    assert result(loaded, "sse") == "ids=1,2,3,4,5,6 resumed_from=3"


def test_sse_event_arrives_within_500_ms(loaded: Page) -> None:
    text = result(loaded, "sse-latency")
    match = re.fullmatch(r"max_ms=(\d+)", text)
    assert match, text
    assert int(match.group(1)) < 500


def test_media_element_seeks_with_range_requests(loaded: Page, session: FeatureSession) -> None:
    assert result(loaded, "media") == "seeked=20 duration=30"
    statuses = json.loads(request(session.port, path="/api/media-log")[2])
    assert 206 in statuses


def test_20_mb_upload_through_file_input(
    loaded: Page, session: FeatureSession, tmp_path: Path
) -> None:
    upload = tmp_path / "upload.bin"
    data = os.urandom(UPLOAD_BYTES)
    upload.write_bytes(data)
    loaded.set_input_files("#file", str(upload))
    expected = f"size={UPLOAD_BYTES} sha256={hashlib.sha256(data).hexdigest()}"
    assert result(loaded, "upload") == expected


def test_form_post_and_screenshot(page: Page, session: FeatureSession, tmp_path: Path) -> None:
    small = tmp_path / "small.txt"
    small.write_bytes(b"x" * 1000)
    page.set_input_files("#file", str(small))
    for element in ("module", "image-size", "fetch", "ws", "sse", "sse-latency", "media", "upload"):
        result(page, element)
    ARTIFACTS.mkdir(exist_ok=True)
    variant = "root" if not session.base else "base-path"
    page.screenshot(path=str(ARTIFACTS / f"browser-{variant}.png"), full_page=True)
    page.fill("#message", "posted <through> the relay")
    with page.expect_navigation():
        page.click("#submit")
    assert page.locator("#form-result").inner_text() == "posted <through> the relay"
    assert page.url == f"{session.origin}/form"


def test_private_app_in_chromium(browser: Browser, tmp_path: Path) -> None:
    with feature_session(tmp_path, "/", "--private") as private:
        assert "?sandbridge_token=" in private.url
        context = browser.new_context()
        try:
            page = context.new_page()
            page.goto(private.url)
            assert page.url == f"{private.origin}/"
            assert result(page, "fetch") == "/api/hello?x=1"
            assert result(page, "ws").startswith("protocol=chat.v1 text=hello")
            cookies = context.cookies()
            assert [c["httpOnly"] for c in cookies] == [True]
            stranger = browser.new_context().new_page()
            response = stranger.goto(f"{private.origin}/")
            assert response is not None and response.status == 403
            stranger.context.close()
        finally:
            context.close()


def test_private_far_app_in_chromium_survives_a_reconnect(
    browser: Browser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A far ``--private`` app through ``sandbridge connect``: the laptop's token URL
    lands on the app with its cookie, and the page still works after the link is cut."""
    laptop_xdg = tmp_path / "laptop-xdg"
    laptop_xdg.mkdir(mode=0o700)
    with far_machine(tmp_path, monkeypatch, daemon=False, private=True) as far:
        laptop = Laptop(laptop_xdg, far.serve_stdio)
        context = browser.new_context()
        try:
            url = laptop.app_url(far, far.feature_port)
            assert "?sandbridge_token=" in url
            origin = url.split("?", 1)[0].rstrip("/")
            page = context.new_page()
            page.goto(url)
            assert page.url == f"{origin}/"
            assert result(page, "fetch") == "/api/hello?x=1"
            assert result(page, "ws").startswith("protocol=chat.v1 text=hello")
            assert [c["httpOnly"] for c in context.cookies()] == [True]
            [first] = _serve_stdio_pids(laptop)
            os.kill(first, signal.SIGKILL)
            laptop.wait_after("sandbridge: far: link lost", "sandbridge: far: connected")
            page.reload()
            assert result(page, "fetch") == "/api/hello?x=1"
            stranger = browser.new_context().new_page()
            response = stranger.goto(f"{origin}/")
            assert response is not None and response.status == 403
            stranger.context.close()
        finally:
            context.close()
            laptop.stop()
