"""The broker against a hostile sandbox entry: real sockets, a fake entry played by the test.

Whatever the entry or the worker sends, the client is refused with ``not_ready``, the
reservation is spent (recorded ``aborted``) and the session keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import select
import socket
import struct
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import nacl.signing
import pytest

from sandbridge.aio import untrusted_fds
from sandbridge.exceptions import ControlError
from sandbridge.places.registry import SessionEntry
from sandbridge.places.socket_path import short_path
from sandbridge.terminals import approval, channel, frames, keys
from sandbridge.terminals import broker as broker_module
from sandbridge.terminals.active_terminal import FINAL_DRAIN_TIMEOUT
from sandbridge.terminals.attach import attach
from sandbridge.terminals.broker import (
    MAX_CONTROL_CONNECTIONS,
    MAX_REFUSED_KEYS_AUDITED,
    MAX_STORED_REQUESTS,
    TerminalBroker,
)
from sandbridge.terminals.config_dir import config_dir
from sandbridge.terminals.control import call
from sandbridge.terminals.frames import Kind
from sandbridge.terminals.journal import MAX_RECORDS, AuditLog, ReservationJournal
from sandbridge.terminals.sandbox_channel import SandboxChannel
from sandbridge.terminals.settings import STOP_MARGIN, TerminalSettings


@pytest.fixture(autouse=True)
def private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
        path = tmp_path / name.lower()
        path.mkdir(mode=0o700)
        monkeypatch.setenv(name, str(path))


def _no_fd(entry: socket.socket) -> None:
    entry.send(b'{"ok": true}')


def _regular_file(entry: socket.socket) -> None:
    with open(os.devnull, "rb") as file:
        socket.send_fds(entry, [b'{"ok": true}'], [file.fileno()])


_SINKS: list[socket.socket] = []
# Sockets the entry handed over that the host must let go of (the host shares this process).
_SENT_INODES: list[int] = []
_CLOSERS: list[threading.Thread] = []


def _lingering_tcp_socket(entry: socket.socket) -> None:
    """A TCP socket toward a peer that never reads, send queue full, SO_LINGER 600 s; the
    entry closes its copy, so the host holds the last reference: closing that on the
    event loop would stop the host for 600 s."""
    sink = socket.socket()
    sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sink.bind(("127.0.0.1", 0))
    sink.listen(1)  # never accepts
    _SINKS.append(sink)
    stuck = socket.socket()
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    stuck.connect(sink.getsockname())
    stuck.setblocking(False)
    try:
        while True:
            stuck.send(b"x" * 65536)
    except BlockingIOError:
        pass
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 600))
    _SENT_INODES.append(os.fstat(stuck.fileno()).st_ino)
    socket.send_fds(entry, [b'{"ok": true}'], [stuck.fileno()])
    # Closed off the test's loop: whichever close is the last one would wait.
    closer = threading.Thread(target=stuck.close, daemon=True)
    closer.start()
    _CLOSERS.append(closer)


def _open_socket_inodes() -> set[int]:
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            found.add(os.stat(f"/proc/self/fd/{fd}").st_ino)
    return found


def _many_descriptors(entry: socket.socket) -> None:
    host_end, worker_end = socket.socketpair()
    with host_end, worker_end:
        socket.send_fds(entry, [b'{"ok": true}'], [host_end.fileno()] * 10)


# Workers that stay open after their reply (the test closes them): a worker that closes at
# once makes the host's START fail before the reply is even parsed.
_LINGERING: list[socket.socket] = []


def _worker(reply: bytes, linger: bool = False) -> Callable[[socket.socket], None]:
    def start(entry: socket.socket) -> None:
        host_end, worker_end = socket.socketpair()
        with host_end:
            socket.send_fds(entry, [b'{"ok": true}'], [host_end.fileno()])
        worker_end.sendall(reply)
        if linger:
            _LINGERING.append(worker_end)
        else:
            worker_end.close()

    return start


async def _approved_request(owner: nacl.signing.SigningKey) -> str:
    """A request in session ``web``, signed by ``owner`` and approved by it for 60 s."""
    info = await asyncio.to_thread(call, "web", {"op": "info"})
    document = approval.sign_request(owner, "web", info["instance"], "", time.time())
    request = await asyncio.to_thread(call, "web", {"op": "request", "request": document})
    request_id: str = request["id"]
    shown = await asyncio.to_thread(call, "web", {"op": "show", "id": request_id})
    signed = approval.sign_approval(
        owner,
        request_id,
        approval.Request("web", info["instance"], shown["request"]["requester"], "", 0, "n"),
        60,
        time.time(),
    )
    await asyncio.to_thread(call, "web", {"op": "approve", "id": request_id, "approval": signed})
    return request_id


def _queued(sock: socket.socket) -> int:
    """Bytes waiting in ``sock``'s receive queue."""
    raw = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    return int.from_bytes(raw, sys.byteorder)


def _ready() -> bytes:
    """A well-formed READY: a worker key and a stream header of the right lengths."""
    public, _ = channel.keypair()
    body = {"public": public.hex(), "header": "00" * channel.HEADER_BYTES}
    return frames.encode(Kind.READY, json.dumps(body).encode())


HOSTILE_ENTRIES = {
    "no descriptor": _no_fd,
    "a regular file": _regular_file,
    "oversized READY": _worker(bytes([Kind.READY]) + (1 << 30).to_bytes(4, "big")),
    "READY without keys": _worker(frames.encode(Kind.READY, b'{"public": "00"}')),
    "CIPHER before READY": _worker(frames.encode(Kind.CIPHER, b"x" * 40)),
    "unknown frame kind": _worker(b"\x09\0\0\0\0"),
    "closes at once": _worker(b""),
    "deeply nested READY": _worker(frames.encode(Kind.READY, b"[" * 4000), linger=True),
    "a lingering TCP socket": _lingering_tcp_socket,
    "more descriptors than room": _many_descriptors,
}


@pytest.mark.parametrize("behaviour", list(HOSTILE_ENTRIES))
def test_a_hostile_entry_or_worker_costs_only_that_attach(tmp_path: Path, behaviour: str) -> None:
    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        host_end, sandbox_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sandbox_end.setblocking(False)
        broker = TerminalBroker(
            entry.id,
            entry.control_socket,
            SandboxChannel(host_end),
            TerminalSettings(ready_budget=3.0),
        )
        await broker.start()
        loop = asyncio.get_running_loop()
        try:
            owner = keys.owner_key()
            request_id = await _approved_request(owner)

            async def hostile_entry() -> None:
                message = await loop.sock_recv(sandbox_end, 1024)
                assert json.loads(message) == {"op": "start"}
                HOSTILE_ENTRIES[behaviour](sandbox_end)

            entry_task = asyncio.create_task(hostile_entry())
            with pytest.raises(ControlError) as refused:
                await attach(request_id, owner)
            await entry_task
            assert refused.value.code == "not_ready"
            states = [r["state"] for r in ReservationJournal().ring.records()]
            assert states == ["aborted"]
            listing = await asyncio.to_thread(call, "web", {"op": "list"})
            assert [r["state"] for r in listing["requests"]] == ["ended"]
            for closer in _CLOSERS:
                closer.join(5)
                assert not closer.is_alive(), "the entry's close waited: the host closed first"
            assert untrusted_fds.settle()
            assert not set(_SENT_INODES) & _open_socket_inodes(), "the host kept the socket"
        finally:
            _SENT_INODES.clear()
            _CLOSERS.clear()
            while _LINGERING:
                _LINGERING.pop().close()
            while _SINKS:
                _SINKS.pop().close()
            sandbox_end.close()
            await broker.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_session_without_a_sandbox_refuses_no_sandbox_and_spends_no_approval(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        broker = TerminalBroker(entry.id, entry.control_socket, None, TerminalSettings())
        await broker.start()
        try:
            owner = keys.owner_key()
            request_id = await _approved_request(owner)
            with pytest.raises(ControlError) as refused:
                await attach(request_id, owner)
            assert refused.value.code == "no_sandbox"
            assert str(refused.value) == "this session has no sandbox to open a terminal in"
            assert ReservationJournal().ring.records() == []  # the approval is not spent
            listing = await asyncio.to_thread(call, "web", {"op": "list"})
            assert [r["state"] for r in listing["requests"]] == ["approved"]
            refusals = [r for r in AuditLog().records() if r["event"] == "refusal"]
            assert [r["reason_code"] for r in refusals] == ["no_sandbox"]
        finally:
            await broker.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_worker_ending_with_a_malformed_reason_is_audited_as_unknown(tmp_path: Path) -> None:
    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        host_end, sandbox_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sandbox_end.setblocking(False)
        broker = TerminalBroker(
            entry.id,
            entry.control_socket,
            SandboxChannel(host_end),
            TerminalSettings(ready_budget=3.0),
        )
        await broker.start()
        loop = asyncio.get_running_loop()
        stdin_read, stdin_write = os.pipe()
        stdout_read, stdout_write = os.pipe()
        try:
            owner = keys.owner_key()
            request_id = await _approved_request(owner)

            host_link, worker_link = socket.socketpair()

            async def hostile_entry() -> None:
                await loop.sock_recv(sandbox_end, 1024)
                with host_link:
                    socket.send_fds(sandbox_end, [b'{"ok": true}'], [host_link.fileno()])
                ended = frames.encode(Kind.ENDED, b'{"reason": [], "status": 0}')
                worker_link.sendall(_ready() + ended)  # and stays open, reading nothing

            entry_task = asyncio.create_task(hostile_entry())
            with worker_link:
                ending = await attach(request_id, owner, stdin_read, stdout_write)
            await entry_task
            # The fake worker never sent an EXIT: the host's STOP says the end it audited.
            assert ending.reason == "unknown"
            ends = [r for r in AuditLog().records() if r["event"] == "end"]
            assert [(r["end"], r["status"]) for r in ends] == [("unknown", 0)]
            states = [r["state"] for r in ReservationJournal().ring.records()]
            assert states == ["ended"]
        finally:
            for fd in (stdin_read, stdin_write, stdout_read, stdout_write):
                os.close(fd)
            sandbox_end.close()
            await broker.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 30))


async def _exchange(entry: SessionEntry, *lines: bytes) -> list[dict[str, object]]:
    """Send raw control lines on one connection; the answer to each, parsed."""
    with short_path(entry.control_socket) as path:
        reader, writer = await asyncio.open_unix_connection(str(path))
    answers = []
    try:
        for line in lines:
            writer.write(line + b"\n")
            answers.append(json.loads(await reader.readline()))
    finally:
        writer.close()
    return answers


def test_a_deeply_nested_control_line_is_refused_as_malformed(tmp_path: Path) -> None:
    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        broker = TerminalBroker(entry.id, entry.control_socket, None)
        await broker.start()
        try:
            [answer] = await _exchange(entry, b"[" * 16000)
            assert answer["ok"] is False and answer["code"] == "malformed"
            [info] = await _exchange(entry, b'{"op": "info"}')  # and the session keeps serving
            assert info["ok"] is True
        finally:
            await broker.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 30))


@pytest.mark.parametrize("rows", ["1e400", "true", "24.5", '"24"'])
def test_an_attach_proof_whose_size_is_not_an_integer_is_refused_as_malformed(
    tmp_path: Path, rows: str
) -> None:
    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        host_end, sandbox_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        broker = TerminalBroker(entry.id, entry.control_socket, SandboxChannel(host_end))
        await broker.start()
        try:
            request_id = await _approved_request(keys.owner_key())
            public, _ = channel.keypair()
            proof = f'{{"public": "{public.hex()}", "signature": "00", "rows": {rows}, "cols": 80}}'
            hello, answer = await _exchange(
                entry, json.dumps({"op": "attach", "id": request_id}).encode(), proof.encode()
            )
            assert hello["ok"] is True
            assert answer["ok"] is False and answer["code"] == "malformed"
            listing = await asyncio.to_thread(call, "web", {"op": "list"})
            assert [r["state"] for r in listing["requests"]] == ["approved"]  # nothing started
        finally:
            sandbox_end.close()
            await broker.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_revoked_worker_that_never_reads_its_link_is_cut_off(tmp_path: Path) -> None:
    """The worker takes nothing from its link, so the host's writes to it (input, leases)
    stall; a revocation still closes the relay after the grace plus STOP_MARGIN."""

    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        host_end, sandbox_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sandbox_end.setblocking(False)
        settings = TerminalSettings(ready_budget=3.0, refresh=0.1, hangup_grace=0.1)
        broker = TerminalBroker(entry.id, entry.control_socket, SandboxChannel(host_end), settings)
        await broker.start()
        loop = asyncio.get_running_loop()
        host_link, worker_link = socket.socketpair()
        worker_link.setblocking(False)
        try:
            owner = keys.owner_key()
            request_id = await _approved_request(owner)

            async def hostile_entry() -> None:
                await loop.sock_recv(sandbox_end, 1024)
                with host_link:
                    socket.send_fds(sandbox_end, [b'{"ok": true}'], [host_link.fileno()])
                await loop.sock_sendall(
                    worker_link, _ready() + frames.encode(Kind.CIPHER, b"o" * 40)
                )

            entry_task = asyncio.create_task(hostile_entry())
            with short_path(entry.control_socket) as path:
                reader, writer = await asyncio.open_unix_connection(str(path))
            writer.write(json.dumps({"op": "attach", "id": request_id}).encode() + b"\n")
            hello = json.loads(await reader.readline())
            public, _ = channel.keypair()
            transcript = approval.attach_transcript(
                "web", hello["instance"], request_id, bytes.fromhex(hello["challenge"]), public
            )
            proof = {
                "public": public.hex(), "signature": owner.sign(transcript).signature.hex(),
                "rows": 24, "cols": 80,
            }  # fmt: skip
            writer.write(json.dumps(proof).encode() + b"\n")
            assert json.loads(await reader.readline())["ok"] is True
            await entry_task
            # Input the worker never takes: the host's link to it fills up and stays full.
            paste = frames.encode(Kind.CIPHER, b"i" * channel.MAX_ENVELOPE)
            for _ in range(256):  # 4 MiB
                writer.write(paste)
            # The link is full once its queue stops growing for a few refreshes; every lease
            # the host tried since then is stuck in its write to the worker.
            queued, stable_since = -1, time.monotonic()
            while time.monotonic() - stable_since < 3 * settings.refresh:
                await asyncio.sleep(settings.refresh / 2)
                now_queued = _queued(worker_link)
                if now_queued != queued:
                    queued, stable_since = now_queued, time.monotonic()
            await asyncio.to_thread(call, "web", {"op": "revoke", "id": request_id})
            revoked = time.monotonic()
            # Reading nothing still (reading would let the host's stuck writes go on): wait
            # for the host to hang up its end.
            poller = select.poll()
            poller.register(worker_link, select.POLLRDHUP)
            deadline = revoked + settings.hangup_grace + STOP_MARGIN + 3
            hung_up: list[tuple[int, int]] = []
            while not hung_up and (left := deadline - time.monotonic()) > 0:
                hung_up = await asyncio.to_thread(poller.poll, left * 1000)
            assert hung_up, "the relay stayed open past the cut-off"
            while not (ends := [r for r in AuditLog().records() if r["event"] == "end"]):
                assert time.monotonic() < deadline + FINAL_DRAIN_TIMEOUT, "no end was audited"
                await asyncio.sleep(0.05)  # polls the audit for the host's last step
            assert [r["end"] for r in ends] == ["revoked"]
            writer.close()
        finally:
            worker_link.close()
            sandbox_end.close()
            await broker.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_finished_requests_are_forgotten_oldest_first_past_the_bound(tmp_path: Path) -> None:
    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        broker = TerminalBroker(entry.id, entry.control_socket, None)
        await broker.start()
        try:
            owner = keys.owner_key()
            instance = (await asyncio.to_thread(call, "web", {"op": "info"}))["instance"]

            def request() -> str:
                document = approval.sign_request(owner, "web", instance, "", time.time())
                answer = call("web", {"op": "request", "request": document})
                return str(answer["id"])

            def fill() -> tuple[str, list[str]]:
                pending = request()
                denied = []
                for _ in range(MAX_STORED_REQUESTS + 1):
                    denied.append(request())
                    call("web", {"op": "deny", "id": denied[-1]})
                return pending, denied

            pending, denied = await asyncio.to_thread(fill)
            listing = await asyncio.to_thread(call, "web", {"op": "list"})
            ids = [r["id"] for r in listing["requests"]]
            assert len(ids) == MAX_STORED_REQUESTS
            assert ids == [pending, *denied[2:]]  # the two oldest finished ones went
            with pytest.raises(ControlError) as forgotten:
                await asyncio.to_thread(call, "web", {"op": "show", "id": denied[0]})
            assert forgotten.value.code == "unknown_request"
        finally:
            await broker.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_a_broken_key_file_is_a_documented_refusal_and_the_session_keeps_serving(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        broker = TerminalBroker(entry.id, entry.control_socket, None)
        await broker.start()
        try:
            owner = keys.owner_key()
            request_id = await _approved_request(owner)
            requesters = config_dir() / keys.REQUESTERS
            requesters.write_bytes(b"#" * (keys.MAX_REQUESTERS_FILE_BYTES + 1))
            requesters.chmod(0o600)
            with pytest.raises(ControlError) as refused:
                await attach(request_id, owner)
            assert refused.value.code == "key_file"
            assert str(requesters) in str(refused.value)
            requesters.unlink()
            listing = await asyncio.to_thread(call, "web", {"op": "list"})
            assert [r["id"] for r in listing["requests"]] == [request_id]
        finally:
            await broker.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_restarted_broker_keeps_its_session_keys_and_takes_nothing_else_from_its_file(
    tmp_path: Path,
) -> None:
    """A request from a key the owner allowed for this session only stays attachable
    after the daemon restarts (the key is kept with it); a request the file holds that
    this broker could not have made (an unallowed requester, another session's id, a
    malformed or repeated id) is left out."""

    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        path = entry.path / "terminals.json"
        guest, stranger, third = (nacl.signing.SigningKey.generate() for _ in range(3))
        first = TerminalBroker(entry.id, entry.control_socket, None, pending_path=path)
        await first.start()
        try:
            instance = (await asyncio.to_thread(call, "web", {"op": "info"}))["instance"]
            await asyncio.to_thread(call, "web", {"op": "allow", "key": keys.public_hex(guest)})
            document = approval.sign_request(guest, "web", instance, "", time.time())
            answer = await asyncio.to_thread(call, "web", {"op": "request", "request": document})
            request_id = answer["id"]
        finally:
            await first.close()
        data = json.loads(path.read_text())
        planted = approval.sign_request(stranger, "web", instance, "", time.time())
        data["requests"] += [
            ["web:0badf00d", planted],
            ["other:0badf00d", document],
            ["web:../../x", document],
            [request_id, planted],
        ]
        path.write_text(json.dumps(data))
        entry.control_socket.unlink()  # as the daemon does before serving it again
        second = TerminalBroker(entry.id, entry.control_socket, None, pending_path=path)
        await second.start()
        try:
            listing = await asyncio.to_thread(call, "web", {"op": "list"})
            assert [(r["id"], r["requester"]) for r in listing["requests"]] == [
                (request_id, keys.public_hex(guest))
            ]
            allowed = await asyncio.to_thread(
                call, "web", {"op": "allow", "key": keys.public_hex(third)}
            )
            assert keys.public_hex(guest) in allowed["allowed"]
        finally:
            await second.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_requested_duration_is_listed_audited_and_kept_across_a_restart(tmp_path: Path) -> None:
    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        path = entry.path / "terminals.json"
        first = TerminalBroker(entry.id, entry.control_socket, None, pending_path=path)
        await first.start()
        try:
            owner = keys.owner_key()
            instance = (await asyncio.to_thread(call, "web", {"op": "info"}))["instance"]
            document = approval.sign_request(owner, "web", instance, "", time.time(), 300)
            answer = await asyncio.to_thread(call, "web", {"op": "request", "request": document})
            listing = await asyncio.to_thread(call, "web", {"op": "list"})
            assert [r["duration"] for r in listing["requests"]] == [300]
            shown = await asyncio.to_thread(call, "web", {"op": "show", "id": answer["id"]})
            assert shown["duration"] == 300
            (record,) = [r for r in AuditLog().records() if r["event"] == "request"]
            assert record["duration"] == 300
        finally:
            await first.close()
        entry.control_socket.unlink()  # as the daemon does before serving it again
        second = TerminalBroker(entry.id, entry.control_socket, None, pending_path=path)
        await second.start()
        try:
            assert [r["duration"] for r in second.listing()] == [300]
        finally:
            await second.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_copy_of_a_signed_request_is_refused_also_after_a_restart(tmp_path: Path) -> None:
    # Whoever saw a request cross (a far serve-stdio, a connect) could send it again:
    # each copy was a new pending request in the requester's name.
    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        path = entry.path / "terminals.json"
        first = TerminalBroker(entry.id, entry.control_socket, None, pending_path=path)
        await first.start()
        owner = keys.owner_key()
        try:
            instance = (await asyncio.to_thread(call, "web", {"op": "info"}))["instance"]
            document = approval.sign_request(owner, "web", instance, "", time.time())
            message = {"op": "request", "request": document}
            answer = await asyncio.to_thread(call, "web", message)
            await asyncio.to_thread(call, "web", {"op": "deny", "id": answer["id"]})
            with pytest.raises(ControlError) as copy:
                await asyncio.to_thread(call, "web", message)
            assert (copy.value.code, str(copy.value)) == (
                "used", "this request was already taken; a copy is refused"
            )  # fmt: skip
            old = approval.sign_request(owner, "web", instance, "", time.time() - 400)
            with pytest.raises(ControlError) as late:
                await asyncio.to_thread(call, "web", {"op": "request", "request": old})
            assert late.value.code == "expired" and "check the requester's clock" in str(late.value)
        finally:
            await first.close()
        entry.control_socket.unlink()  # as the daemon does before serving it again
        second = TerminalBroker(entry.id, entry.control_socket, None, pending_path=path)
        await second.start()
        try:
            with pytest.raises(ControlError) as copy:
                await asyncio.to_thread(call, "web", message)
            assert copy.value.code == "used"
            assert [r["state"] for r in second.listing()] == []  # the denied one is gone
        finally:
            await second.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_the_broker_tells_of_each_change_the_dashboard_shows(tmp_path: Path) -> None:
    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        broker = TerminalBroker(entry.id, entry.control_socket, None)
        told: list[int] = []
        broker.on_change = lambda: told.append(len(broker.listing()))
        await broker.start()
        try:
            owner = keys.owner_key()
            instance = (await asyncio.to_thread(call, "web", {"op": "info"}))["instance"]
            document = approval.sign_request(owner, "web", instance, "", time.time())
            answer = await asyncio.to_thread(call, "web", {"op": "request", "request": document})
            told.clear()  # the info above was an op too
            await asyncio.to_thread(call, "web", {"op": "deny", "id": answer["id"]})
            assert told == [1], "told once, after the move"
            assert broker.listing()[0]["state"] == "denied"
        finally:
            await broker.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_control_client_that_sends_no_line_is_dropped_after_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A silent connection was held for the session's whole life: in the daemon, one
    # descriptor of the one process that serves every session, per connection, for good.
    monkeypatch.setattr(broker_module, "CONTROL_LINE_TIMEOUT", 0.5)

    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        broker = TerminalBroker(entry.id, entry.control_socket, None)
        await broker.start()
        try:
            with short_path(entry.control_socket) as path:
                reader, writer = await asyncio.open_unix_connection(str(path))
            writer.write(b'{"op": "in')  # half a line, then nothing
            async with asyncio.timeout(5):
                assert await reader.read() == b""  # closed by the session, no answer
            writer.close()
            [info] = await _exchange(entry, b'{"op": "info"}')  # the session serves on
            assert info["ok"] is True
        finally:
            await broker.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_control_connections_past_the_limit_are_refused_busy_and_closed(tmp_path: Path) -> None:
    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        broker = TerminalBroker(entry.id, entry.control_socket, None)
        await broker.start()
        held = []
        try:
            with short_path(entry.control_socket) as path:
                for _ in range(MAX_CONTROL_CONNECTIONS - 1):
                    held.append(await asyncio.open_unix_connection(str(path)))
                # One answered after them: the server has taken every one before it.
                [info] = await _exchange(entry, b'{"op": "info"}')
                assert info["ok"] is True
                held.append(await asyncio.open_unix_connection(str(path)))  # the last place
                reader, writer = await asyncio.open_unix_connection(str(path))
                async with asyncio.timeout(5):
                    answer = json.loads(await reader.readline())
                    assert await reader.read() == b""
                writer.close()
            assert answer["ok"] is False and answer["code"] == "busy"
            assert str(MAX_CONTROL_CONNECTIONS) in answer["error"]
            for _, held_writer in held:
                held_writer.close()
            async with asyncio.timeout(5):
                while True:  # once they have gone, a new connection is served again
                    [info] = await _exchange(entry, b'{"op": "info"}')
                    if info["ok"]:
                        break
                    await asyncio.sleep(0.05)
        finally:
            for _, held_writer in held:
                held_writer.close()
            await broker.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_requests_from_keys_not_allowed_cannot_flush_the_audit_log(tmp_path: Path) -> None:
    # A teammate whose key was taken off (or any stranger on the link) asks again and
    # again: each refusal was a record, and 256 of them replaced the whole ring, the
    # records of that teammate's own terminals with it.
    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        broker = TerminalBroker(entry.id, entry.control_socket, None)
        await broker.start()
        try:
            owner = keys.owner_key()
            instance = (await asyncio.to_thread(call, "web", {"op": "info"}))["instance"]
            mine = approval.sign_request(owner, "web", instance, "evidence", time.time())
            await asyncio.to_thread(call, "web", {"op": "request", "request": mine})

            def flood() -> set[str]:
                codes = set()
                stranger = nacl.signing.SigningKey.generate()
                for i in range(MAX_RECORDS + 44):
                    key = stranger if i % 2 else nacl.signing.SigningKey.generate()
                    document = approval.sign_request(key, "web", instance, "", time.time())
                    with pytest.raises(ControlError) as refused:
                        call("web", {"op": "request", "request": document})
                    codes.add(refused.value.code)
                return codes

            assert await asyncio.to_thread(flood) == {"not_allowed"}
            records = AuditLog().records()
            assert [r["reason"] for r in records if r["event"] == "request"] == ["evidence"]
            refusals = [r for r in records if r.get("reason_code") == "not_allowed"]
            assert len(refusals) == MAX_REFUSED_KEYS_AUDITED
            assert len({r["requester"] for r in refusals}) == MAX_REFUSED_KEYS_AUDITED
        finally:
            await broker.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 120))


@pytest.mark.parametrize("created", [10**400, -(10**400)])
def test_a_request_whose_time_is_an_integer_beyond_a_float_is_refused_as_malformed(
    tmp_path: Path, created: int
) -> None:
    # Any key may sign a request (the allowed check comes after the signature's): a JSON
    # integer of 400 digits is no float, and float() of it raised OverflowError in the
    # handler, so the connection closed with no answer and a traceback in the log.
    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        broker = TerminalBroker(entry.id, entry.control_socket, None)
        await broker.start()
        try:
            stranger = nacl.signing.SigningKey.generate()
            body = {
                "version": approval.VERSION, "kind": "request", "session": "web",
                "instance": broker.instance, "requester": keys.public_hex(stranger),
                "reason": "", "created": created, "nonce": approval.new_nonce(),
            }  # fmt: skip
            document = approval._sign(stranger, approval.REQUEST_CONTEXT, body)
            line = json.dumps({"op": "request", "request": document}).encode()
            [answer] = await _exchange(entry, line)
            assert answer["ok"] is False and answer["code"] == "malformed", answer
            assert "created" in str(answer["error"])
            [info] = await _exchange(entry, b'{"op": "info"}')
            assert info["ok"] is True
        finally:
            await broker.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_finished_request_is_listed_with_when_it_ended(tmp_path: Path) -> None:
    # The dashboard shows it in place of "Approved until": an ended approval holds no more.
    async def scenario() -> None:
        entry = SessionEntry.create("web", tmp_path)
        broker = TerminalBroker(entry.id, entry.control_socket, None)
        await broker.start()
        try:
            owner = keys.owner_key()
            instance = (await asyncio.to_thread(call, "web", {"op": "info"}))["instance"]
            document = approval.sign_request(owner, "web", instance, "", time.time())
            answer = await asyncio.to_thread(call, "web", {"op": "request", "request": document})
            assert broker.listing()[0]["ended"] is None  # pending
            before = time.time()
            await asyncio.to_thread(call, "web", {"op": "deny", "id": answer["id"]})
            (row,) = broker.listing()
            assert (row["state"], before <= row["ended"] <= time.time()) == ("denied", True)
        finally:
            await broker.close()
            entry.remove()

    asyncio.run(asyncio.wait_for(scenario(), 30))
