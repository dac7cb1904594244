"""Owner-approved terminals end to end: a real sandbox, the real CLI, a real PTY."""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from sandbridge.terminals import approval, channel, frames, keys
from sandbridge.terminals.channel import Message, MessageType
from sandbridge.terminals.control import control_socket, short_path
from sandbridge.terminals.frames import Kind
from tests.conftest import SANDBRIDGE, processes_with
from tests.terminals.harness import (
    PROMPT,
    SIZE,
    WORKER_MARKER,
    TerminalSession,
    finish,
)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[TerminalSession]:
    # -v: the session's events (terminal.ended) on its stderr
    running = TerminalSession(tmp_path, options=("-v",))
    yield running
    running.stop()


def ends(session: TerminalSession, request_id: str) -> list[dict[str, object]]:
    return [r for r in session.audit() if r["event"] == "end" and r["request"] == request_id]


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
        assert int(end["bytes_in"]) > 0 and int(end["bytes_out"]) > 0  # type: ignore[call-overload]
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
    child.expect(r"([A-Za-z0-9+/=]{1000,})\r\nOUT-4")
    import base64

    received = base64.b64decode(child.match.group(1))
    assert hashlib.sha256(received).hexdigest() == hashlib.sha256(payload_out).hexdigest()
    assert (
        hashlib.sha256((session.work / "in.bin").read_bytes()).hexdigest()
        == hashlib.sha256(payload_in).hexdigest()
    )
    child.sendline("exit")
    assert finish(child)[0] == 0


def test_replay_of_a_used_approval_opens_nothing(session: TerminalSession) -> None:
    request_id = session.approved()
    child = session.attach(request_id)
    child.expect(PROMPT)
    child.sendline("exit")
    finish(child)
    before = session.audit()
    replay = session.cli("terminal", "attach", request_id, check=False)
    assert replay.returncode == 2 and "already used" in replay.stderr
    assert session.running(WORKER_MARKER) == []
    after = session.audit()
    assert [r["event"] for r in after[len(before) :]] == ["refusal"]
    again = session.cli("terminal", "attach", request_id, check=False)
    assert again.returncode == 2
    assert session.audit() == after, "a repeated replay leaves the audit unchanged"


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


def test_a_wrong_key_is_refused(session: TerminalSession, tmp_path: Path) -> None:
    request_id = session.approved()
    stranger = tmp_path / "stranger.key"
    keys.create_key(stranger)
    result = session.cli("terminal", "attach", request_id, "--key", str(stranger), check=False)
    assert result.returncode == 2 and "not signed by the approved key" in result.stderr
    assert session.running(WORKER_MARKER) == []
    not_listed = session.cli("terminal", "request", "web", "--key", str(stranger), check=False)
    assert not_listed.returncode == 2 and "may not request" in not_listed.stderr


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


def test_the_relay_never_sees_plaintext(tmp_path: Path) -> None:
    tap = tmp_path / "tap.bin"
    session = TerminalSession(tmp_path, knobs={"SANDBRIDGE_TERMINAL_RELAY_TAP": str(tap)})
    try:
        child = session.attach(session.approved())
        child.expect(PROMPT)
        child.sendline("echo PLAINTEXT-MARKER-$((40+2))")
        child.expect("PLAINTEXT-MARKER-42")
        child.sendline("exit")
        finish(child)
        forwarded = tap.read_bytes()
        assert len(forwarded) > 100
        for text in (b"PLAINTEXT-MARKER", b"echo", b"exit", b"@sandbox"):
            assert text not in forwarded
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


def test_control_socket_is_host_only(session: TerminalSession) -> None:
    control = next((session.tmp_path / "xdg").glob("sandbridge-*/sessions/web/control.sock"))
    assert control.stat().st_mode & 0o777 == 0o600
    probe = session.cli("terminal", "list")
    assert "no terminal requests" in probe.stdout
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(control))
        sock.sendall(b'{"op": "nope"}\n')
        assert b"unknown_op" in sock.recv(4096)


def _raw_attach(
    session: TerminalSession, request_id: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[socket.socket, channel.Sender, channel.Receiver]:
    """The attach handshake done by hand, so the test can send what no client would."""
    monkeypatch.setenv("XDG_CONFIG_HOME", session.env["XDG_CONFIG_HOME"])
    monkeypatch.setenv("XDG_RUNTIME_DIR", session.env["XDG_RUNTIME_DIR"])
    sock = socket.socket(socket.AF_UNIX)
    with short_path(control_socket("web")) as path:
        sock.connect(str(path))
    # Unbuffered: the frames that follow the answer lines must stay in the socket.
    file = sock.makefile("rb", buffering=0)
    sock.sendall(json.dumps({"op": "attach", "id": request_id}).encode() + b"\n")
    hello = json.loads(file.readline())
    public, secret = channel.keypair()
    transcript = approval.attach_transcript(
        "web", hello["instance"], request_id, bytes.fromhex(hello["challenge"]), public
    )
    proof = {
        "public": public.hex(),
        "signature": keys.owner_key().sign(transcript).signature.hex(),
        "rows": 24,
        "cols": 80,
    }
    sock.sendall(json.dumps(proof).encode() + b"\n")
    ready = json.loads(file.readline())
    assert ready["ok"], ready
    receive_key, send_key = channel.client_keys(public, secret, bytes.fromhex(ready["public"]))
    receiver = channel.Receiver(receive_key, bytes.fromhex(ready["header"]), channel.TO_CLIENT)
    sender = channel.Sender(send_key)
    sock.sendall(frames.encode(Kind.CIPHER, sender.header))
    return sock, sender, receiver


def _exit_reason(sock: socket.socket, receiver: channel.Receiver) -> str:
    """Read the worker's messages until its authenticated EXIT; return the reason."""
    decoder = frames.FrameDecoder(frames.FROM_HOST_TO_CLIENT)
    while data := sock.recv(65536):
        for frame in decoder.feed(data):
            if frame.kind is Kind.STOP:
                return str(json.loads(frame.body)["reason"])
            message = receiver.open(frame.body)
            if message.type is MessageType.EXIT:
                return message.exit[1]
    raise AssertionError("the terminal ended without an EXIT")


@pytest.mark.parametrize("attack", ["tampered", "reordered", "oversized"])
def test_tampered_reordered_and_oversized_frames_end_the_terminal(
    session: TerminalSession, monkeypatch: pytest.MonkeyPatch, attack: str
) -> None:
    request_id = session.approved()
    sock, sender, receiver = _raw_attach(session, request_id, monkeypatch)
    with sock:
        first = sender.seal(Message(MessageType.DATA, b"touch first-ran\n"))
        second = sender.seal(Message(MessageType.DATA, b"touch second-ran\n"))
        if attack == "tampered":
            sock.sendall(frames.encode(Kind.CIPHER, first[:-1] + bytes([first[-1] ^ 1])))
        elif attack == "reordered":
            sock.sendall(frames.encode(Kind.CIPHER, second) + frames.encode(Kind.CIPHER, first))
        else:
            sock.sendall(
                bytes([Kind.CIPHER]) + (frames.MAX_BODY[Kind.CIPHER] + 1).to_bytes(4, "big")
            )
        assert _exit_reason(sock, receiver) == "protocol"
    session.process.wait_line("sandbridge: terminal.ended", "stderr")
    assert ends(session, request_id)[0]["end"] == "protocol"
    assert not (session.work / "first-ran").exists()
    assert not (session.work / "second-ran").exists()


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
    events = [r["event"] for r in session.audit()]
    assert events[-1] == ("end" if answer == "y" else "denial")


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
    assert ends(first, request_id) == []
    second = TerminalSession(tmp_path)  # the same name, a new instance
    try:
        (end,) = ends(second, request_id)
        assert end["end"] == "aborted"
        replay = second.cli("terminal", "attach", request_id, check=False)
        assert replay.returncode == 2 and "no request" in replay.stderr
    finally:
        second.stop()


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


# What a command in the terminal runs: the PTY worker is its shell's parent; without more,
# the command (same uid, same namespaces) could take the worker's descriptors, the host's
# link among them, with pidfd_getfd(2) (syscall 438), or its memory with ptrace(2).
_GRAB_WORKER_DESCRIPTORS = """
import ctypes, os
stat = open(f"/proc/{os.getppid()}/stat").read()
worker = int(stat.rsplit(")", 1)[1].split()[1])
libc = ctypes.CDLL(None, use_errno=True)
pidfd = os.pidfd_open(worker)
got = [fd for fd in range(3, 256) if libc.syscall(438, pidfd, fd, 0) >= 0]
print("grabbed", len(got), os.strerror(ctypes.get_errno()), flush=True)
"""


def test_a_command_in_the_terminal_cannot_take_the_workers_descriptors(tmp_path: Path) -> None:
    session = TerminalSession(tmp_path, "bwrap")
    script = session.work / "grab.py"  # the workdir: what the terminal sees
    script.write_text(_GRAB_WORKER_DESCRIPTORS)
    try:
        child = session.attach(session.approved())
        child.expect(PROMPT)
        child.sendline(f"{sys.executable} {script}")
        child.expect(r"grabbed (\d+) ([^\r\n]*)\r\n")
        assert (child.match.group(1), child.match.group(2)) == ("0", "Operation not permitted")
        child.sendline("exit 0")
        status, _ = finish(child)
        assert status == 0
    finally:
        session.stop()


def test_the_sandbox_cannot_reach_the_owners_clipboard(session: TerminalSession) -> None:
    # OSC 52 from the shell: a write ("echo pwned" in the clipboard) and a read (the
    # terminal would answer with the clipboard's content, typed into the sandbox).
    child = session.attach(session.approved())
    child.expect(PROMPT)
    child.sendline(
        r"printf '\033]52;c;ZWNobyBwd25lZA==\007\033]52;c;?\033\\\033]0;t\007CLIP-%s\n' $((6*7))"
    )
    child.expect("CLIP-42\r\n")
    assert "\x1b]52" not in child.before
    assert child.before.endswith("\x1b]0;t\x07")  # a title is the window's own
    child.sendline("exit")
    assert finish(child)[0] == 0


def test_the_sandbox_cannot_make_the_owners_terminal_act_beyond_its_window(
    session: TerminalSession,
) -> None:
    # OSC 52 as a raw C1 byte (0x9D), a title report (typed back as input), iconify and
    # resize, a tmux passthrough of OSC 52, a font query, a programmed F6 key (DECUDK);
    # "Ý" (C3 9D) and a title pass.
    child = session.attach(session.approved())
    child.expect(PROMPT)
    child.sendline(
        r"printf 'A\23552;c;ZWNobw==\007B\033[21tC\033[2t\033[8;5;5tD"
        r"\033Ptmux;\033\033]52;c;ZWNobw==\007\033\\E\033]50;?\007F\303\235G"
        r"\033P0|17/70776e\033\\\033]2;t\007H-%s\n' $((6*7))"
    )
    child.expect("H-42\r\n")
    assert child.before.endswith("ABCD\x1b\\EF\u00ddG\x1b]2;t\x07")
    child.sendline("exit")
    assert finish(child)[0] == 0
