"""``sandbridge-open`` against a real ``sandbridge host``."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from sandbridge.protocol.limits import MAX_HTML_SNAPSHOT_BYTES, MAX_OPENS_PER_WINDOW
from tests.conftest import PYTHON, Relay, echo, host_port_of, request
from tests.relay.host.test_open_requests import _open

OPEN_HELPER = [PYTHON, "-m", "sandbridge.relay.inside.open_helper"]


def test_a_page_refused_before_it_was_all_sent_gets_the_refusal_not_a_broken_pipe(
    runtime_dir: Path, tmp_path: Path
) -> None:
    # The host refuses a page past the rate limit on its first line, unread: the helper,
    # still sending 2 MiB, must show that refusal, not the broken pipe it sends into.
    page = tmp_path / "page.html"
    page.write_bytes(b"<!doctype html>" + b"x" * (MAX_HTML_SNAPSHOT_BYTES - 15))
    relay = Relay(runtime_dir, host_args=("--open", "print"))
    try:
        for n in range(MAX_OPENS_PER_WINDOW):
            assert _open(relay, f"https://example.com/{n}")["ok"] is True
        result = subprocess.run(
            [*OPEN_HELPER, "--html", str(page)],
            env=relay.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        relay.stop()
    assert result.returncode == 1
    assert result.stderr.startswith("sandbridge-open: refused: too many open requests"), (
        result.stderr
    )


def _helper(relay: Relay, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*OPEN_HELPER, *args],
        env=relay.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_jupyter_style_redirect_file_opens_the_app_it_names_with_its_token(
    runtime_dir: Path, tmp_path: Path, app_port: int
) -> None:
    page = tmp_path / "jpserver-7-open.html"
    target = f"http://localhost:{app_port}/lab?token=t0k3n"
    page.write_text(f'<meta http-equiv="refresh" content="1;url={target}" />')
    relay = Relay(runtime_dir, host_args=("--open", "print"))
    try:
        result = _helper(relay, page.as_uri())
        assert result.returncode == 0, result.stderr
        url = result.stdout.strip()
        assert url.endswith(f".localhost:{host_port_of(url)}/lab?token=t0k3n"), url
        assert echo(host_port_of(url), "/lab?token=t0k3n")["path"] == "/lab?token=t0k3n"
        relay.host.wait_line(f"sandbridge: the sandbox opens {url}", "stderr")
    finally:
        relay.stop()


def test_a_file_url_of_any_other_page_is_shown_as_a_snapshot_of_its_bytes(
    runtime_dir: Path, tmp_path: Path
) -> None:
    page = tmp_path / "report.html"
    body = "<!doctype html><title>report</title><p>\u2713</p>".encode()
    page.write_bytes(body)
    relay = Relay(runtime_dir, host_args=("--open", "print"))
    try:
        result = _helper(relay, page.as_uri())
        assert result.returncode == 0, result.stderr
        url = result.stdout.strip()
        assert url.endswith(f".localhost:{host_port_of(url)}/"), url
        status, headers, served = request(host_port_of(url))
        assert (status, served) == (200, body)
        assert headers["Content-Security-Policy"] == "sandbox allow-scripts"
    finally:
        relay.stop()


def test_a_refused_file_url_is_one_line_and_asks_the_host_nothing(
    runtime_dir: Path, tmp_path: Path
) -> None:
    fifo = tmp_path / "pipe.html"
    os.mkfifo(fifo)
    relay = Relay(runtime_dir, host_args=("--open", "print"))
    try:
        cases = {
            "file://evil/x.html": "file URL names a host ('evil')",
            fifo.as_uri(): "pipe.html' is a FIFO, not a file",
            (tmp_path / "none.html").as_uri(): "(No such file or directory)",
        }
        for url, error in cases.items():
            result = _helper(relay, url)
            assert result.returncode == 1, result
            assert result.stdout == ""
            assert result.stderr.startswith("sandbridge-open: ") and error in result.stderr
            assert result.stderr.count("\n") == 1, result.stderr
    finally:
        relay.stop()
    assert "the sandbox opens" not in relay.host.drain("stderr")


def test_a_redirect_to_a_port_where_nothing_listens_is_said_like_its_url(
    runtime_dir: Path, tmp_path: Path
) -> None:
    # A port held bound and not listening: nothing else on this machine can take it meanwhile.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        page = tmp_path / "jpserver-8-open.html"
        page.write_text(f'<meta http-equiv="refresh" content="1;url=http://localhost:{port}/lab">')
        relay = Relay(runtime_dir, host_args=("--open", "print"))
        try:
            result = _helper(relay, page.as_uri())
        finally:
            relay.stop()
    assert result.returncode == 1
    assert result.stderr == (
        f"sandbridge-open: nothing is listening on port {port} inside the sandbox "
        f"(connect to 127.0.0.1:{port} failed: [Errno 111] Connection refused; "
        f"connect to [::1]:{port} failed: [Errno 111] Connection refused): "
        f"start the app, then open http://localhost:{port}/lab\n"
    )
