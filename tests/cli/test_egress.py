"""``sandbridge egress``: what the owner sees when there is nothing to answer, or when a
command names no request (the answers themselves: tests/egress/test_requests_in_sandbox.py)."""

from __future__ import annotations

import select
import subprocess
import time
from pathlib import Path

import pexpect
import pytest

from tests.conftest import SANDBRIDGE
from tests.support.command_in_process import sandbridge
from tests.terminals.harness import TerminalSession

# The sandbox asks for one host, then rewrites the line the session printed about it
# (the terminal is the sandbox's to write to) so that the id stands beside another host.
FORGER = (
    "sandbridge-allow evil.test:443 --reason 'upload' --no-wait > id.tmp && mv id.tmp id; "
    "printf '\\033[1A\\033[2Ksandbridge: the sandbox asks for pkgs.example.com:443: egress request "
    '%s, reason: \\042pip install\\042\\n\' "$(cat id)"; exec sleep 600'
)


def egress(*args: str) -> subprocess.CompletedProcess[str]:
    """``sandbridge egress ARGS`` in this process (tests/support/command_in_process.py)."""
    return sandbridge("egress", *args)


def test_nothing_pending_without_sessions(xdg: Path) -> None:
    result = egress("pending")
    assert (result.returncode, result.stdout) == (0, "no pending egress requests\n")
    assert egress("pending", "--json").stdout == "[]\n"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("approve", "not-an-id"), "request id 'not-an-id': expected SESSION:XXXXXXXX"),
        (("deny", "s-1:zz"), "request id 's-1:zz': expected SESSION:XXXXXXXX"),
        (("approve", "s-1:00000000", "--once", "--session"), "not allowed with argument"),
        (("pending", "--session", "../x"), "'../x'"),
    ],
)
def test_a_bad_argument_is_refused_naming_it(xdg: Path, args: tuple[str, ...], error: str) -> None:
    result = egress(*args)
    assert result.returncode == 2
    assert error in result.stderr


def test_a_session_that_is_not_running_is_named(xdg: Path) -> None:
    result = egress("approve", "s-gone:00000000")
    assert result.returncode == 2
    assert "s-gone" in result.stderr


def _asked_id(session: TerminalSession) -> str:
    asked = session.work / "id"
    deadline = time.monotonic() + 30
    while not asked.exists():
        assert time.monotonic() < deadline, "sandbridge-allow printed no id"
        select.select([], [], [], 0.05)
    return asked.read_text().strip()


def _approve_at_a_terminal(
    session: TerminalSession, request_id: str, *options: str
) -> pexpect.spawn:
    return pexpect.spawn(
        SANDBRIDGE[0],
        [*SANDBRIDGE[1:], "egress", "approve", request_id, *options],
        env=session.env,
        timeout=30,
        encoding="utf-8",
    )


def test_at_a_terminal_approve_shows_what_is_granted_and_asks(tmp_path: Path) -> None:
    session = TerminalSession(tmp_path, command=FORGER)
    try:
        request_id = _asked_id(session)
        # What the owner's screen shows: the session's line about evil.test overwritten.
        forged = (
            "\x1b[1A\x1b[2Ksandbridge: the sandbox asks for pkgs.example.com:443: egress request"
        )
        assert request_id in session.process.wait_line(forged, timeout=30)
        child = _approve_at_a_terminal(session, request_id)
        child.expect_exact(f"egress request {request_id} asks for evil.test:443 (one connection)")
        child.expect_exact("approve it? [y/N] ")
        child.sendline("n")
        child.expect_exact(f"not approved: egress request {request_id} stays pending")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 1
        assert request_id in session.cli("egress", "pending").stdout
        # What --private grants is what the owner is shown.
        child = _approve_at_a_terminal(session, request_id, "--private")
        child.expect_exact(f"egress request {request_id} asks for evil.test:443 private (one")
        child.expect_exact("approve it? [y/N] ")
        child.sendline("n")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 1
        child = _approve_at_a_terminal(session, request_id)
        child.expect_exact("approve it? [y/N] ")
        child.sendline("y")
        child.expect_exact(f"approved {request_id}: evil.test:443, one connection")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
        assert session.cli("egress", "pending").stdout == "no pending egress requests\n"
    finally:
        session.stop()
