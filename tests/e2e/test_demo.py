"""``sandbridge demo``: the README's first command, end to end across a real sandbox."""

from __future__ import annotations

import json
import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, SANDBRIDGE, Process, host_port_of, request


def _start(tmp_path: Path, *options: str, env: dict[str, str] | None = None) -> tuple[Process, str]:
    process = Process(
        [*SANDBRIDGE, "demo", "--workdir", str(tmp_path), "--ro-bind", str(REPO), *options], env=env
    )
    line = process.wait_line("sandbridge demo: open ")
    return process, line.split()[3]


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[str]:
    process, url = _start(tmp_path)
    yield url
    assert process.stop(signal.SIGINT) == 128 + signal.SIGINT


def test_demo_page_uses_root_absolute_assets(demo: str) -> None:
    port = host_port_of(demo)
    status, _, page = request(port)
    assert status == 200
    assert b'href="/styles.css"' in page and b'src="/script.js"' in page
    for path, content_type in (("/styles.css", "text/css"), ("/script.js", "text/javascript")):
        status, headers, _ = request(port, path=path)
        assert status == 200 and headers["Content-Type"].startswith(content_type)


def test_demo_form_post_and_media_fetch(demo: str) -> None:
    port = host_port_of(demo)
    status, _, page = request(
        port,
        "POST",
        "/submit",
        body=b"message=hi+there",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 200 and b'<p id="received">hi there</p>' in page
    status, _, body = request(port, path="/media?path=videos/intro.mp4&session=abc")
    assert json.loads(body)["session"] == "abc"


def test_demo_under_a_base_path(tmp_path: Path) -> None:
    process, url = _start(tmp_path, "--base-path", "/app")
    try:
        assert url.endswith("/app")
        port = host_port_of(url)
        assert request(port, path="/app")[0] == 200
        assert request(port, path="/styles.css")[2].startswith(b"body")
    finally:
        process.stop(signal.SIGINT)


def test_demo_open_hands_the_url_to_the_host_browser(tmp_path: Path) -> None:
    opened = tmp_path / "opened"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\necho "$1" > {opened}\n')
    browser.chmod(stat.S_IRWXU)
    process, url = _start(tmp_path, "--open", env={**os.environ, "BROWSER": str(browser)})
    try:
        process.wait_line("sandbridge demo: opened ", "stdout")
        assert opened.read_text().strip() == url
    finally:
        process.stop(signal.SIGINT)
