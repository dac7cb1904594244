"""Owner-approved terminals end to end, against what may not pass: a replayed
approval, a wrong key, tampered frames, a relay that would read the terminal, and a
sandbox reaching for the worker's descriptors or beyond the owner's terminal window."""

from __future__ import annotations

import json
import select
import socket
import sys
from pathlib import Path

import pytest

from sandbridge.places.socket_path import short_path
from sandbridge.terminals import approval, channel, frames, keys
from sandbridge.terminals.channel import Message, MessageType
from sandbridge.terminals.control import control_socket
from sandbridge.terminals.frames import Kind
from tests.terminals.harness import (
    PROMPT,
    WORKER_MARKER,
    TerminalSession,
    ends,
    finish,
)


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


def test_a_wrong_key_is_refused(session: TerminalSession, tmp_path: Path) -> None:
    request_id = session.approved()
    stranger = tmp_path / "stranger.key"
    keys.create_key(stranger)
    result = session.cli("terminal", "attach", request_id, "--key", str(stranger), check=False)
    assert result.returncode == 2 and "not signed by the approved key" in result.stderr
    assert session.running(WORKER_MARKER) == []
    not_listed = session.cli("terminal", "request", "web", "--key", str(stranger), check=False)
    assert not_listed.returncode == 2 and "may not request" in not_listed.stderr


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


def _ends_said(
    sock: socket.socket, receiver: channel.Receiver, count: int = 1
) -> list[tuple[str, str]]:
    """Read the worker's messages until ``count`` ends are said to the client, each
    ``(kind, reason)``: the worker's authenticated EXIT or the host's STOP."""
    decoder = frames.FrameDecoder(frames.FROM_HOST_TO_CLIENT)
    said: list[tuple[str, str]] = []
    while len(said) < count:
        data = sock.recv(65536)
        assert data, f"the terminal ended without an EXIT after {said!r}"
        for frame in decoder.feed(data):
            if frame.kind is Kind.STOP:
                said.append(("STOP", str(json.loads(frame.body)["reason"])))
            elif (message := receiver.open(frame.body)).type is MessageType.EXIT:
                said.append(("EXIT", message.exit[1]))
    return said


def _exit_reason(sock: socket.socket, receiver: channel.Receiver) -> str:
    """The reason of the first end said to the client."""
    return _ends_said(sock, receiver)[0][1]


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


def test_the_host_leaves_the_close_to_the_client_once_the_end_is_said(
    session: TerminalSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the EXIT, the host waits for the client to close: closing first, a key or a
    heartbeat the client wrote meanwhile would fail with EPIPE and cost the client the
    EXIT it had not read (it said the relay was lost, not why the terminal ended)."""
    request_id = session.approved()
    sock, sender, receiver = _raw_attach(session, request_id, monkeypatch)
    with sock:
        sock.sendall(
            frames.encode(Kind.CIPHER, sender.seal(Message(MessageType.DATA, b"exit 3\n")))
        )
        # The worker's EXIT, then the host's own word on the end; then no close: the host
        # waits for the client's.
        assert _ends_said(sock, receiver, 2) == [("EXIT", "exit"), ("STOP", "exit")]
        assert select.select([sock], [], [], 1.0)[0] == []
        sock.sendall(frames.encode(Kind.CIPHER, sender.seal(Message(MessageType.HEARTBEAT))))
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(65536) == b""  # the host closes once the client has
    session.process.wait_line("sandbridge: terminal.ended", "stderr")
    assert ends(session, request_id)[0]["end"] == "exit"


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
