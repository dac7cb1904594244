"""``sandbridge-open`` against a real ``sandbridge host``."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from sandbridge.protocol.limits import MAX_HTML_SNAPSHOT_BYTES, MAX_OPENS_PER_WINDOW
from sandbridge.relay.open_helper import listening
from tests.conftest import PYTHON, Relay
from tests.relay.test_open_requests import _open

OPEN_HELPER = [PYTHON, "-m", "sandbridge.relay.open_helper"]


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


def test_an_app_on_ipv6_loopback_only_is_found_listening() -> None:
    with socket.create_server(("::1", 0), family=socket.AF_INET6) as app:
        assert listening(app.getsockname()[1]) is None


def test_nothing_listening_names_each_loopback_address_tried() -> None:
    with socket.socket() as reserved:  # bound, not listening: connections are refused
        reserved.bind(("127.0.0.1", 0))
        port = reserved.getsockname()[1]
        assert listening(port) == (
            f"connect to 127.0.0.1:{port} failed: [Errno 111] Connection refused; "
            f"connect to [::1]:{port} failed: [Errno 111] Connection refused"
        )
