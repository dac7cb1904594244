"""Owner-approved terminals end to end: a real sandbox, the real CLI, a real PTY.

Attaching and using a terminal, as the owner or a requester; what a requester, the
sandbox or a client may not do is ``test_terminal_hostile_e2e.py``, how a terminal ends
``test_terminal_end_e2e.py``, its time limits and leases ``test_terminal_lease_e2e.py``
(a theme a file: each runs whole on one of the suite's workers, side by side)."""

from __future__ import annotations

import base64
import hashlib
import os
import re
from pathlib import Path

import pexpect
import pytest

from sandbridge.terminals import keys
from tests.conftest import SANDBRIDGE
from tests.terminals.harness import (
    PROMPT,
    SIZE,
    WORKER_MARKER,
    TerminalSession,
    audited,
    ends,
    finish,
)


@pytest.mark.parametrize("backend", ["bwrap", "unshare"])
def test_normal_attach(tmp_path: Path, backend: str) -> None:
    session = TerminalSession(tmp_path, backend)
    try:
        request_id = session.approved()
        child = session.attach(request_id)
        child.expect(PROMPT)
        child.sendline("stty size; env | sort | cut -d= -f1 | tr '\\n' ' '; echo ENV-$((6*7))")
        child.expect("ENV-42\r\n")
        output = child.before
        assert f"{SIZE[0]} {SIZE[1]}" in output
        names = output.split("\n")[-1].split()
        assert names == [
            "HOME", "LANG", "PATH", "PS1", "PWD", "SANDBRIDGE_TERMINAL", "SHELL", "SHLVL",
            "TERM", "_",
        ]  # fmt: skip
        child.sendline("ls -l /proc/$$/fd | grep -c socket:; echo SOCKETS-$((9))")
        child.expect(r"(\d+)\r\nSOCKETS-9")
        assert child.match.group(1) == "0", "the shell inherited a socket (the host's link?)"
        child.setwinsize(40, 120)  # the client gets SIGWINCH and sends a RESIZE
        child.sendline("stty size")
        child.expect("40 120")
        child.sendline("sleep 1001; echo after-ctrl-c")
        session.wait_for("sleep 1001")
        child.sendcontrol("c")
        child.expect(PROMPT)
        child.sendline("pgrep -f 'sleep 1001' || echo no-sleep-$((1))")
        child.expect("no-sleep-1")
        child.sendline("printf 'final-%s\\n' output; exit 4")
        status, output = finish(child)
        assert "final-output" in output
        assert status == 4
        (end,) = ends(session, request_id)
        assert end["end"] == "exit" and end["status"] == 4
        assert int(end["bytes_in"]) > 0 and int(end["bytes_out"]) > 0
        assert session.process.popen.poll() is None, "the agent's session must outlive the terminal"
        assert session.running(WORKER_MARKER) == []
    finally:
        session.stop()


def test_16_kib_in_and_out_with_matching_sha256(session: TerminalSession) -> None:
    payload_out = os.urandom(16 * 1024)
    (session.work / "out.bin").write_bytes(payload_out)
    payload_in = os.urandom(16 * 1024)
    child = session.attach(session.approved())
    child.expect(PROMPT)
    child.sendline(
        "stty raw -echo; echo RAW-$((1)); head -c 16384 > in.bin; stty sane; echo IN-$((1+1))"
    )
    child.expect("RAW-1")
    view = memoryview(payload_in)
    while view:
        view = view[os.write(child.child_fd, view) :]
    child.expect("IN-2\r\n")
    child.sendline("base64 -w0 out.bin; echo; echo OUT-$((2+2))")
    # The marker alone: a pattern that also spans the 21,848 characters of base64 before
    # it is searched again over the whole buffer at each read, and its backtracking made
    # the search quadratic (11 s of the test's CPU on a quiet machine, past the timeout
    # under load). The encoded file ends the line before the marker (after the shell's
    # bracketed-paste switch), searched once.
    child.expect_exact("\r\nOUT-4")
    encoded = re.search(r"[A-Za-z0-9+/=]{1000,}$", child.before.split("\r\n")[-1])
    assert encoded is not None, child.before[-200:]
    received = base64.b64decode(encoded.group())
    assert hashlib.sha256(received).hexdigest() == hashlib.sha256(payload_out).hexdigest()
    assert (
        hashlib.sha256((session.work / "in.bin").read_bytes()).hexdigest()
        == hashlib.sha256(payload_in).hexdigest()
    )
    child.sendline("exit")
    assert finish(child)[0] == 0


def test_request_waits_for_approval_then_attaches(session: TerminalSession) -> None:
    script = f"{' '.join(SANDBRIDGE)} terminal request web --reason waiting; echo EXIT:$?"
    child = pexpect.spawn("sh", ["-c", script], env=session.env, timeout=30, encoding="utf-8")
    child.expect(r"request (web:[0-9a-f]{8}): waiting for the owner")
    session.cli("terminal", "approve", child.match.group(1))
    child.expect(PROMPT)
    child.sendline("exit 5")
    child.expect("EXIT:5")


@pytest.mark.parametrize(("answer", "status"), [("y", 0), ("n", 1)])
def test_shell_asks_the_owner_on_the_terminal(
    session: TerminalSession, answer: str, status: int
) -> None:
    script = f"{' '.join(SANDBRIDGE)} shell web --duration 5m; echo EXIT:$?"
    child = pexpect.spawn("sh", ["-c", script], env=session.env, timeout=30, encoding="utf-8")
    child.expect(r"requester [0-9a-f]{64}")
    child.expect(r"Approve\? \[y/N\] ")
    child.sendline(answer)
    if answer == "y":
        child.expect(PROMPT)
        child.sendline("exit")
    child.expect(f"EXIT:{status}")
    last = "end" if answer == "y" else "denial"
    records = audited(session.audit, lambda records: records[-1]["event"] == last)
    assert records[-1]["event"] == last


def test_a_listed_requester_attaches_with_its_own_key_only(
    session: TerminalSession, tmp_path: Path
) -> None:
    alice = tmp_path / "alice.key"
    public = keys.public_hex(keys.create_key(alice))
    config = Path(session.env["XDG_CONFIG_HOME"]) / "sandbridge"
    session.request()  # the owner's first command creates the owner key and its directory
    (config / "requesters").write_text(f"{public}  # alice\n")
    request_id = session.approved(key=alice)
    assert session.cli("terminal", "key", "--key", str(alice)).stdout.strip() == public
    as_owner = session.cli("terminal", "attach", request_id, check=False)
    assert as_owner.returncode == 2 and "not signed by the approved key" in as_owner.stderr
    child = session.attach(request_id, key=alice)
    child.expect(PROMPT)
    child.sendline("exit")
    assert finish(child)[0] == 0
    admission = next(r for r in session.audit() if r["event"] == "admission")
    assert admission["requester"] == public


def test_a_key_allowed_for_one_session_may_request_but_not_attach_unapproved(
    session: TerminalSession, tmp_path: Path
) -> None:
    bob = tmp_path / "bob.key"
    public = keys.public_hex(keys.create_key(bob))
    refused = session.cli("terminal", "request", "web", "--key", str(bob), check=False)
    assert refused.returncode == 2 and "may not request" in refused.stderr
    session.cli("terminal", "allow", "web", public)
    request_id = session.request(key=bob)
    unapproved = session.cli("terminal", "attach", request_id, "--key", str(bob), check=False)
    assert unapproved.returncode == 2 and "pending" in unapproved.stderr
    assert session.running(WORKER_MARKER) == []
    bad = session.cli("terminal", "allow", "web", "not-a-key", check=False)
    assert bad.returncode == 2 and "'not-a-key'" in bad.stderr
