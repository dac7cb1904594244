"""``sandbridge-open`` against a real ``sandbridge host``."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sandbridge.protocol.limits import MAX_HTML_SNAPSHOT_BYTES, MAX_OPENS_PER_WINDOW
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
