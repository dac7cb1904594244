"""HTML snapshots (``sandbridge-open --html``) served by ``sandbridge host``: what another
local user can do to one."""

from __future__ import annotations

import json
import select
import socket
import subprocess
from pathlib import Path

from sandbridge.protocol.limits import (
    HTML_READ_TIMEOUT,
    MAX_HTML_SNAPSHOT_BYTES,
    MAX_OPENS_PER_WINDOW,
)
from sandbridge.relay.host.snapshot import HEAD_TIMEOUT, MAX_CONNECTIONS
from tests.conftest import Relay, host_field, host_port_of, read_to_end, request
from tests.relay.host.test_local_peer import AS_NOBODY, FLOOD_CONNECTIONS, flood, needs_root
from tests.relay.host.test_open_requests import _ask

PAGE = b"<!doctype html><title>report</title><p>what the agent found in the owner's code"
# Run as another user: one GET with the snapshot's own Host; prints what came back.
READ_AS_ANOTHER_USER = """
import socket, sys
port, host = int(sys.argv[1]), sys.argv[2]
with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
    sock.sendall(b"GET / HTTP/1.1\\r\\nHost: " + host.encode() + b"\\r\\n\\r\\n")
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
print(repr(data))
"""


def _snapshot(relay: Relay) -> str:
    line = json.dumps({"type": "open", "html_bytes": len(PAGE)}).encode() + b"\n"
    answer = _ask(relay.runtime_dir / "relay.sock", line + PAGE)
    assert answer["ok"] is True, answer
    return str(answer["url"])


@needs_root
def test_another_users_connections_never_reach_a_snapshot(runtime_dir: Path) -> None:
    relay = Relay(runtime_dir, host_args=("--open", "print"))
    flooder = None
    try:
        url = _snapshot(relay)
        port = host_port_of(url)
        host = url.split("/")[2]
        read = subprocess.run(
            [*AS_NOBODY, "/usr/bin/python3", "-c", READ_AS_ANOTHER_USER, str(port), host],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert read.stdout.strip() == "b''"  # closed unanswered, even knowing the name
        flooder = flood(port)
        assert flooder.wait_line("refused ", timeout=60) == f"refused {FLOOD_CONNECTIONS}"
        status, _, body = request(port)
        assert (status, body) == (200, PAGE)
    finally:
        if flooder is not None:
            flooder.stop()
        relay.stop()


def test_snapshots_past_the_rate_limit_are_refused_before_their_bytes_arrive(
    runtime_dir: Path,
) -> None:
    # Each announces the largest page and sends none of it: before, the host waited for
    # (and would have held) every page of any number of such connections, and counted
    # them against the limit only once the bytes were in.
    relay = Relay(runtime_dir, host_args=("--open", "print"))
    line = json.dumps({"type": "open", "html_bytes": MAX_HTML_SNAPSHOT_BYTES}).encode() + b"\n"
    senders = []
    try:
        for _ in range(MAX_OPENS_PER_WINDOW + 1):
            sender = socket.socket(socket.AF_UNIX)
            senders.append(sender)
            sender.connect(str(relay.runtime_dir / "relay.sock"))
            sender.sendall(line)
        # Well within the time the page has to arrive: the refusal comes at once.
        ready, _, _ = select.select(senders, [], [], HTML_READ_TIMEOUT / 2)
        assert len(ready) == 1
        answer = json.loads(ready[0].makefile("rb").readline())
        assert answer["ok"] is False
        assert str(answer["error"]).startswith("too many open requests")
    finally:
        for sender in senders:
            sender.close()
        relay.stop()


def test_connections_past_the_cap_are_closed_at_once_and_the_held_ones_served(
    runtime_dir: Path,
) -> None:
    # The owner's uid (a --network full sandbox) holding connections: before, each was
    # kept, any number of them, and one that never read its answer held the page's copy
    # until the session ended.
    relay = Relay(runtime_dir, host_args=("--open", "print"))
    held: list[socket.socket] = []
    try:
        port = host_port_of(_snapshot(relay))
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_CONNECTIONS)]
        with socket.create_connection(("127.0.0.1", port), timeout=HEAD_TIMEOUT / 2) as extra:
            try:
                closed = extra.recv(1) == b""
            except ConnectionResetError:
                closed = True
        assert closed
        held[0].sendall(b"GET / HTTP/1.1\r\nHost: " + host_field(port) + b"\r\n\r\n")
        assert read_to_end(held[0]).endswith(b"\r\n\r\n" + PAGE)
    finally:
        for sock in held:
            sock.close()
        relay.stop()
