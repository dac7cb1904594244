"""Owner-approved terminals end to end, at their end: revoked (mid-command, with its
output blocked, the foreground told first), the session's end, the client's or the relay's
loss, escaped descendants cleaned up, and a host crash recorded as aborted."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.conftest import processes_with
from tests.terminals.harness import (
    PROMPT,
    TerminalSession,
    ends,
    finish,
)


def test_revocation_mid_command(session: TerminalSession) -> None:
    request_id = session.approved()
    child = session.attach(request_id)
    child.expect(PROMPT)
    child.sendline("sleep 1002")
    child.expect("sleep 1002\r\n")
    session.wait_for("sleep 1002")
    session.cli("terminal", "revoke", request_id)
    status, output = finish(child)
    assert "terminal ended: revoked" in output
    assert status == 3
    assert session.running("sleep 1002") == []
    assert ends(session, request_id)[0]["end"] == "revoked"


def test_a_setsid_and_double_fork_escape_is_cleaned_up_while_a_sibling_survives(
    tmp_path: Path,
) -> None:
    session = TerminalSession(tmp_path, command="sleep 1005 & exec sleep 600")
    try:
        child = session.attach(session.approved())
        child.expect(PROMPT)
        child.sendline(
            "setsid sleep 1003 & (sh -c 'sleep 1004 &' &); sleep 0.1; echo spawned-$((3))"
        )
        child.expect("spawned-3\r\n")
        session.wait_for("sleep 1003")
        session.wait_for("sleep 1004")
        child.sendline("exit")
        finish(child)
        assert session.running("sleep 1003") == []
        assert session.running("sleep 1004") == []
        assert session.running("sleep 1005"), "the agent's own process must survive"
    finally:
        session.stop()


def test_sigterm_of_the_client_restores_termios_and_ends_the_terminal(
    session: TerminalSession,
) -> None:
    request_id = session.approved()
    child = session.attach(request_id)
    child.expect(PROMPT)
    child.sendline("sleep 1007")
    session.wait_for("sleep 1007")
    (client,) = [p for p in processes_with(request_id) if p != child.pid]
    os.kill(client, signal.SIGTERM)
    status, _ = finish(child)
    assert status == 128 + signal.SIGTERM
    session.process.wait_line("sandbridge: terminal.ended", "stderr")
    assert session.running("sleep 1007") == []
    assert ends(session, request_id)[0]["end"] == "client"


def test_relay_loss_restores_termios(session: TerminalSession) -> None:
    child = session.attach(session.approved())
    child.expect(PROMPT)
    session.process.stop(signal.SIGKILL)
    status, output = finish(child)
    assert status == 3
    assert "terminal ended:" in output


def test_session_end_ends_the_terminal(session: TerminalSession) -> None:
    request_id = session.approved()
    child = session.attach(request_id)
    child.expect(PROMPT)
    session.process.stop()
    status, output = finish(child)
    assert status == 3 and "terminal ended" in output
    (end,) = ends(session, request_id)
    assert end["end"] == "session_end"


def test_a_host_crash_after_reservation_is_recorded_as_aborted(tmp_path: Path) -> None:
    first = TerminalSession(tmp_path)
    request_id = first.approved()
    child = first.attach(request_id)
    child.expect(PROMPT)
    first.process.stop(signal.SIGKILL)  # no end record can be written
    finish(child)
    assert ends(first, request_id, timeout=0) == []  # the host is gone: nothing to wait for
    second = TerminalSession(tmp_path)  # the same name, a new instance
    try:
        (end,) = ends(second, request_id)
        assert end["end"] == "aborted"
        replay = second.cli("terminal", "attach", request_id, check=False)
        assert replay.returncode == 2 and "no request" in replay.stderr
    finally:
        second.stop()


def test_revocation_closes_a_terminal_whose_output_is_blocked(session: TerminalSession) -> None:
    request_id = session.approved()
    child = session.attach(request_id)
    child.expect(PROMPT)
    child.sendline("yes flood-1010")
    session.wait_for("yes flood-1010")
    # Nobody reads the client's output now: the PTY, the worker and the relay block.
    session.cli("terminal", "revoke", request_id)
    session.wait_gone("yes flood-1010", timeout=10)  # within one lease
    child.expect(r"EXIT:(\d+)", timeout=60)
    assert ends(session, request_id)[0]["end"] == "revoked"


def test_the_foreground_gets_sighup_first_and_its_last_output_is_drained(
    session: TerminalSession,
) -> None:
    request_id = session.approved()
    child = session.attach(request_id)
    child.expect(PROMPT)
    child.sendline(
        'sh -c \'trap "echo got-hup-\\$((6*7)); exit 0" HUP; echo trap-set; '
        "while :; do sleep 1; done'"
    )
    child.expect("trap-set")
    session.cli("terminal", "revoke", request_id)
    _, output = finish(child)
    assert "got-hup-42" in output
    assert "terminal ended: revoked" in output
