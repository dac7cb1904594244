"""Owner-approved terminals end to end, in time: the idle limit, the approval's expiry,
the readiness budget and the lease refreshed (slow, unreachable, or behind input the
shell does not read)."""

from __future__ import annotations

import json
import os
import select
import signal
import time
from pathlib import Path

from tests.terminals.harness import (
    PROMPT,
    WORKER_MARKER,
    TerminalSession,
    ends,
    finish,
)


def test_idle_limit_closes_the_terminal_despite_heartbeats(tmp_path: Path) -> None:
    # 6 s idle: the heartbeats both ways at 5 s must not count as activity.
    session = TerminalSession(tmp_path, knobs={"SANDBRIDGE_TERMINAL_IDLE": "6"})
    try:
        request_id = session.approved()
        child = session.attach(request_id)
        child.expect(PROMPT)
        _, output = finish(child)
        assert "terminal ended: idle" in output
        assert ends(session, request_id)[0]["end"] == "idle"
    finally:
        session.stop()


def test_expiry_closes_the_terminal_at_the_approvals_end(tmp_path: Path) -> None:
    session = TerminalSession(tmp_path, knobs={"SANDBRIDGE_TERMINAL_REFRESH": "1"})
    try:
        request_id = session.approved(ttl="6")
        child = session.attach(request_id)
        child.expect(PROMPT)
        child.sendline("sleep 1006")
        _, output = finish(child)
        assert "terminal ended: expired" in output
        assert session.running("sleep 1006") == []
        assert ends(session, request_id)[0]["end"] == "expired"
    finally:
        session.stop()


def test_a_slow_authority_refresh_keeps_input_and_output_flowing(tmp_path: Path) -> None:
    knobs = {"SANDBRIDGE_TERMINAL_REFRESH": "1", "SANDBRIDGE_TERMINAL_REFRESH_DELAY": "3"}
    session = TerminalSession(tmp_path, knobs=knobs)
    try:
        child = session.attach(session.approved())
        child.expect(PROMPT)
        for tick in range(8):  # about 8 s: two slow refreshes at least
            child.sendline(f"sleep 1; echo tick-{tick}-$((6*7))")
            child.expect(f"tick-{tick}-42", timeout=5)
        child.sendline("exit")
        assert finish(child)[0] == 0
    finally:
        session.stop()


def test_a_terminal_starts_only_if_the_approval_covers_the_readiness_budget(
    session: TerminalSession,
) -> None:
    request_id = session.approved(ttl="6")
    approved = next(r for r in session.audit() if r["event"] == "approval")
    deadline = float(approved["expires"]) - 5.0
    while time.time() < deadline:  # a time-based rule: wait until it applies
        select.select([], [], [], deadline - time.time())
    result = session.cli("terminal", "attach", request_id, check=False)
    assert result.returncode == 2 and "expires before a terminal could be ready" in result.stderr
    assert session.running(WORKER_MARKER) == []
    assert not [r for r in session.audit() if r["event"] == "admission"]


def test_an_unreachable_authority_closes_the_terminal_within_one_lease(tmp_path: Path) -> None:
    knobs = {"SANDBRIDGE_TERMINAL_LEASE": "2", "SANDBRIDGE_TERMINAL_REFRESH": "1"}
    session = TerminalSession(tmp_path, knobs=knobs)
    try:
        child = session.attach(session.approved())
        child.expect(PROMPT)
        child.sendline("sleep 1008")
        (sleeper,) = session.wait_for("sleep 1008")
        host = session.process.popen.pid
        os.kill(host, signal.SIGSTOP)  # the authority stops answering
        try:
            fd = os.pidfd_open(sleeper)
            ready, _, _ = select.select([fd], [], [], 10)
            os.close(fd)
            assert ready, "the terminal outlived its lease while the host was unreachable"
        finally:
            os.kill(host, signal.SIGCONT)
        _, output = finish(child)
        assert "terminal ended: lease" in output
    finally:
        session.stop()


def test_input_a_busy_shell_does_not_read_never_holds_up_the_lease(tmp_path: Path) -> None:
    knobs = {"SANDBRIDGE_TERMINAL_LEASE": "2", "SANDBRIDGE_TERMINAL_REFRESH": "0.5"}
    session = TerminalSession(tmp_path, knobs=knobs)
    try:
        request_id = session.approved()
        child = session.attach(request_id)
        child.expect(PROMPT)
        child.sendline("sleep 59")  # not "sleep 60": the session's own "sleep 600" matches it
        session.wait_for("sleep 59")
        # 2 MiB, twice the input window: the worker holds 1 MiB, the host stops reading the
        # client, and the client keeps the rest (it reads its stdin without a limit).
        lines = ("#" + "x" * 1023 + "\n") * 2048
        view = memoryview(lines.encode())
        while view:
            view = view[os.write(child.child_fd, view) :]
        # Three leases of 2 s pass while the shell reads nothing: leases still get through.
        survive_until = time.monotonic() + 3 * 2
        while time.monotonic() < survive_until:
            listing = json.loads(session.cli("terminal", "list", "--json").stdout)
            assert [r["state"] for r in listing] == ["active"]
        session.cli("terminal", "revoke", request_id)
        session.wait_gone("sleep 59", timeout=2)  # at once, not at the end of a lease
        child.expect(r"EXIT:(\d+)", timeout=60)
        assert ends(session, request_id)[0]["end"] == "revoked"
    finally:
        session.stop()
