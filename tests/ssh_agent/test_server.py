"""The ssh-agent bridge on a real Unix socket, in front of a real ``ssh-agent``, used by
the real ``ssh-add`` and ``ssh-keygen -Y sign`` and by hostile raw clients.

The bridge runs in a thread with its own event loop, as the session serves it."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.aio.owner_questions import OwnerQuestions
from sandbridge.exceptions import PolicyError
from sandbridge.protocol import ssh_agent as wire
from sandbridge.ssh_agent import server
from sandbridge.ssh_agent.choice import parse_choice
from sandbridge.ssh_agent.server import AgentBridge
from sandbridge.ssh_agent.signature_log import LOG_NAME, SignatureLog, read_counts
from tests.ssh_agent.owner_agent import OwnerAgent, start_owner_agent
from tests.support.loop_thread import LoopThread


class Bridge(LoopThread):
    def __init__(
        self,
        path: Path,
        owner: OwnerAgent,
        selectors: str,
        max_signatures: int = server.MAX_SIGNATURES,
        questions: OwnerQuestions | None = None,
    ) -> None:
        self.path = path
        self.log_dir = path.parent
        self.bridge = AgentBridge(
            path,
            parse_choice([selectors]),
            str(owner.socket),
            SignatureLog(self.log_dir),
            questions,
            max_signatures=max_signatures,
        )
        super().__init__()

    async def start_servers(self) -> None:
        await self.bridge.start()

    async def close_servers(self) -> None:
        await self.bridge.close()

    def env(self) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "HOME": str(self.log_dir), "SSH_AUTH_SOCK": str(self.path)}

    def log_lines(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in (self.log_dir / LOG_NAME).read_text().splitlines()]


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[OwnerAgent]:
    agent = start_owner_agent(tmp_path)
    yield agent
    agent.stop()


@pytest.fixture
def bridge(tmp_path: Path, owner: OwnerAgent) -> Iterator[Bridge]:
    (tmp_path / "session").mkdir()
    running = Bridge(tmp_path / "session" / "agent.sock", owner, owner.chosen.fingerprint)
    yield running
    running.stop()
    assert running.errors == []


def ssh_add(bridge: Bridge, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh-add", *args], env=bridge.env(), capture_output=True, text=True, timeout=30
    )


def exchange(path: Path, data: bytes) -> bytes:
    """Send ``data``, then read until the bridge closes or goes quiet after an answer."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(15)
        sock.connect(str(path))
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def wire_string(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def test_only_the_chosen_key_is_listed(bridge: Bridge, owner: OwnerAgent) -> None:
    listed = ssh_add(bridge, "-l")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split()[1] == owner.chosen.fingerprint
    assert owner.other.fingerprint not in listed.stdout
    assert len(listed.stdout.splitlines()) == 1


def test_a_key_chosen_by_comment_is_listed(tmp_path: Path, owner: OwnerAgent) -> None:
    running = Bridge(tmp_path / "by-comment.sock", owner, "other")
    try:
        listed = ssh_add(running, "-L")
    finally:
        running.stop()
    assert listed.stdout.strip() == owner.other.public


@pytest.mark.parametrize(
    "args", [("-D",), ("-d", "chosen.pub"), ("other",)], ids=["remove-all", "remove", "add"]
)
def test_changing_the_agent_fails_and_the_owner_agent_keeps_its_keys(
    bridge: Bridge, owner: OwnerAgent, tmp_path: Path, args: tuple[str, ...]
) -> None:
    args = tuple(str(tmp_path / a) if a.startswith(("chosen", "other")) else a for a in args)
    assert ssh_add(bridge, *args).returncode != 0
    owner_keys = subprocess.run(
        ["ssh-add", "-l"], env=owner.env(), capture_output=True, text=True, check=True
    ).stdout
    assert owner.chosen.fingerprint in owner_keys and owner.other.fingerprint in owner_keys


@pytest.mark.parametrize(
    "body",
    [
        bytes([22]) + framed(b"password")[4:],  # lock
        bytes([23]) + framed(b"password")[4:],  # unlock
        bytes([27]) + framed(b"session-bind@openssh.com")[4:],
        bytes([19]),  # remove all
    ],
    ids=["lock", "unlock", "extension", "remove-all"],
)
def test_lock_unlock_and_extensions_get_failure(bridge: Bridge, body: bytes) -> None:
    assert exchange(bridge.path, framed(body)) == wire.failure()


def sign(bridge: Bridge, owner: OwnerAgent, message: Path) -> subprocess.CompletedProcess[str]:
    """``ssh-keygen -Y sign`` of ``message`` with the chosen key through the bridge (its
    public half alone: ssh-keygen would sign with a private key file beside it)."""
    public = message.with_name("chosen-public-only.pub")
    public.write_text(owner.chosen.public + "\n")
    return subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-n", "git", "-f", str(public), str(message)],
        env=bridge.env(),
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_signature_with_the_chosen_key_verifies_and_is_logged_with_its_namespace(
    bridge: Bridge, owner: OwnerAgent, tmp_path: Path
) -> None:
    message = tmp_path / "message"
    message.write_text("signed text\n")
    signed = sign(bridge, owner, message)
    assert signed.returncode == 0, signed.stderr
    allowed = tmp_path / "allowed"
    allowed.write_text(f"me {owner.chosen.public}\n")
    verified = subprocess.run(
        ["ssh-keygen", "-Y", "verify", "-f", str(allowed), "-I", "me", "-n", "git",
         "-s", f"{message}.sig"],
        stdin=message.open("rb"),
        capture_output=True,
        timeout=30,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stderr
    [line] = bridge.log_lines()
    assert line["decision"] == "signed"
    assert line["key"] == owner.chosen.fingerprint
    assert line["for"] == "signature in namespace 'git' (sha512)"
    [count] = read_counts(bridge.log_dir)
    assert (count.key, count.signed, count.refused) == (owner.chosen.fingerprint, 1, 0)


def test_a_sign_request_for_another_key_gets_failure_and_is_counted(
    bridge: Bridge, owner: OwnerAgent
) -> None:
    # What a hostile client sends (ssh-keygen would not ask for a key the agent did not list).
    blob = base64.b64decode(owner.other.public.split()[1])
    request = bytes([13]) + wire_string(blob) + wire_string(b"data") + struct.pack(">I", 0)
    assert exchange(bridge.path, framed(request)) == wire.failure()
    [line] = bridge.log_lines()
    assert (line["decision"], line["reason"]) == ("refused", "not a key the owner chose")
    counts = {c.key: c.refused for c in read_counts(bridge.log_dir)}
    assert counts == {"(keys not offered)": 1, owner.chosen.fingerprint: 0}


def test_an_oversize_length_closes_only_that_connection(bridge: Bridge) -> None:
    assert exchange(bridge.path, struct.pack(">I", wire.MAX_MESSAGE_BYTES + 1)) == b""
    assert ssh_add(bridge, "-l").returncode == 0


def test_a_truncated_message_is_never_answered(bridge: Bridge) -> None:
    assert exchange(bridge.path, struct.pack(">I", 100) + bytes([11])) == b""


def test_a_flood_of_messages_ends_at_the_connection_limit(bridge: Bridge) -> None:
    flood = framed(bytes([22])) * (server.MAX_MESSAGES_PER_CONNECTION + 50)
    answer = exchange(bridge.path, flood)
    assert answer == wire.failure() * server.MAX_MESSAGES_PER_CONNECTION


def test_connections_past_the_limit_are_closed_and_the_others_still_served(
    bridge: Bridge,
) -> None:
    held = []
    try:
        for _ in range(server.MAX_AGENT_CONNECTIONS):
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(str(bridge.path))
            sock.sendall(framed(bytes([11])))
            sock.settimeout(15)
            assert sock.recv(5)  # answered: it is counted as open
            held.append(sock)
        with socket.socket(socket.AF_UNIX) as extra:
            extra.settimeout(15)
            extra.connect(str(bridge.path))
            assert extra.recv(100) == b""  # closed without an answer
        held[0].close()
        held.pop(0)
        # A slot is free again once the bridge has seen that close: ssh-add gets it.
        for _attempt in range(100):
            if ssh_add(bridge, "-l").returncode == 0:
                break
        else:
            pytest.fail("no connection served after one of the held ones closed")
    finally:
        for sock in held:
            sock.close()


def test_a_chosen_key_missing_from_the_owner_agent_is_refused_at_start(
    tmp_path: Path, owner: OwnerAgent
) -> None:
    bridge = AgentBridge(
        tmp_path / "x.sock",
        parse_choice(["gone-key"]),
        str(owner.socket),
        SignatureLog(tmp_path),
    )
    with pytest.raises(PolicyError, match="--ssh-agent gone-key: no key in the owner's agent"):
        asyncio.run(bridge.check())


def test_an_owner_agent_that_does_not_answer_is_refused_at_start(tmp_path: Path) -> None:
    bridge = AgentBridge(
        tmp_path / "x.sock",
        parse_choice(["k"]),
        str(tmp_path / "none.sock"),
        SignatureLog(tmp_path),
    )
    with pytest.raises(PolicyError, match=r"none\.sock does not answer"):
        asyncio.run(bridge.check())


def test_signatures_past_the_rate_limit_get_failure_and_are_logged(
    tmp_path: Path, owner: OwnerAgent
) -> None:
    running = Bridge(tmp_path / "limited.sock", owner, "chosen", max_signatures=2)
    try:
        codes = []
        for attempt in range(3):
            message = tmp_path / f"message{attempt}"
            message.write_text("x")
            codes.append(sign(running, owner, message).returncode)
    finally:
        running.stop()
    assert codes[:2] == [0, 0] and codes[2] != 0
    assert [line["decision"] for line in running.log_lines()] == ["signed", "signed", "refused"]
    assert running.log_lines()[2]["reason"] == "over 2 signatures in 60 s"


def test_a_key_the_owner_removes_is_no_longer_listed_nor_signed_with(
    bridge: Bridge, owner: OwnerAgent
) -> None:
    subprocess.run(
        ["ssh-add", "-d", f"{owner.chosen.path}.pub"], env=owner.env(), check=True,
        capture_output=True,
    )  # fmt: skip
    assert ssh_add(bridge, "-l").stdout.split()[1:2] != [owner.chosen.fingerprint]
    blob = base64.b64decode(owner.chosen.public.split()[1])
    request = bytes([13]) + wire_string(blob) + wire_string(b"data") + struct.pack(">I", 0)
    assert exchange(bridge.path, framed(request)) == wire.failure()


def _add_key_with_comment(owner: OwnerAgent, directory: Path, comment: str) -> str:
    """A new key in the owner's agent under ``comment``; its fingerprint."""
    directory.mkdir()
    path = directory / "key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
    )
    subprocess.run(["ssh-add", "-q", str(path)], env=owner.env(), check=True)
    return subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(path)],
        check=True, capture_output=True, text=True,
    ).stdout.split()[1]  # fmt: skip


def test_a_comment_two_keys_carry_is_refused_at_start_naming_both(
    tmp_path: Path, owner: OwnerAgent
) -> None:
    # ssh-keygen gives every key made on a machine the same user@host comment: such a
    # choice would offer the deploy key beside the one meant.
    second = _add_key_with_comment(owner, tmp_path / "second", "other")
    bridge = AgentBridge(
        tmp_path / "x.sock", parse_choice(["other"]), str(owner.socket), SignatureLog(tmp_path)
    )
    with pytest.raises(PolicyError) as refused:
        asyncio.run(bridge.check())
    assert str(refused.value) == (
        f"--ssh-agent other: 2 keys in the owner's agent have this comment "
        f"({', '.join(sorted([owner.other.fingerprint, second]))}); name the one by its "
        "fingerprint"
    )


def test_a_key_added_later_under_a_chosen_comment_is_not_offered(
    tmp_path: Path, owner: OwnerAgent
) -> None:
    running = Bridge(tmp_path / "by-comment.sock", owner, "other")
    try:
        later = _add_key_with_comment(owner, tmp_path / "later", "other")
        listed = ssh_add(running, "-l").stdout
    finally:
        running.stop()
    assert owner.other.fingerprint in listed
    assert later not in listed
