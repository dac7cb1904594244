"""The host's egress gate on a real Unix socket, with hostile openings and proxy heads.

The gate runs in a thread with its own event loop; clients are plain blocking sockets,
the destination is the echo app on this machine's loopback (allowed with ``private``,
which is what that entry is for), and names resolve through a fixed table.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.egress.gate import Address, EgressGate
from sandbridge.egress.log import EgressLog, read_entries
from sandbridge.project.policy import load_policy
from sandbridge.protocol.contract import PROXY_PORT
from sandbridge.protocol.egress_opening import encode_open
from tests.conftest import free_port
from tests.support.loop_thread import LoopThread


@pytest.fixture(scope="module")
def app_port(shared_app_port: int) -> int:
    return shared_app_port


NAMES = {"app.test": "127.0.0.1", "public.test": "127.0.0.1"}


class TableResolver:
    """Answers from :data:`NAMES`: the names the test owns."""

    async def resolve(self, name: str) -> list[Address]:
        return [ipaddress.ip_address(NAMES[name])] if name in NAMES else []


class Gate(LoopThread):
    def __init__(self, path: Path, log_dir: Path, app_port: int, service_port: int) -> None:
        policy = load_policy(
            Path("/nonexistent"),
            allow=[f"app.test:{app_port} private", f"gate:{service_port}", "public.test"],
        )
        self.path = path
        self.log_dir = log_dir
        self.gate = EgressGate(
            path, policy, EgressLog(log_dir / "egress.jsonl"), resolver=TableResolver()
        )
        super().__init__()

    async def start_servers(self) -> None:
        await self.gate.start()

    async def close_servers(self) -> None:
        await self.gate.close()


@pytest.fixture
def gate(tmp_path: Path, app_port: int) -> Iterator[Gate]:
    running = Gate(tmp_path / "egress.sock", tmp_path, app_port, free_port())
    yield running
    running.stop()


def exchange(
    gate: Gate, data: bytes, port: int = PROXY_PORT, opening: bytes | None = None
) -> bytes:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(15)
        sock.connect(str(gate.path))
        sock.sendall((encode_open(port) if opening is None else opening) + data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def proxy(gate: Gate, data: bytes) -> tuple[bytes, bytes]:
    """The status line and body of the proxy's answer (after the gate's ok line)."""
    answer = exchange(gate, data)
    ok, _, http = answer.partition(b"\n")
    assert json.loads(ok) == {"ok": True}
    head, _, body = http.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0], body


@pytest.mark.parametrize(
    ("opening", "error"),
    [
        (b"garbage\n", "message is not valid JSON"),
        (
            b'{"type":"register","port":80}\n',
            "type must be 'egress' or 'egress_request', got 'register'",
        ),
        (b'{"type":"egress","port":0}\n', "port must be an integer 1..65535, got 0"),
        (b'{"type":"egress","port":22}\n', "add the line '100.64.0.1:22'"),
        (b"x" * 9000 + b"\n", "longer than 8192 bytes"),
    ],
)
def test_bad_opening_is_refused_naming_the_value(gate: Gate, opening: bytes, error: str) -> None:
    answer = json.loads(exchange(gate, b"", opening=opening))
    assert answer["ok"] is False
    assert error in answer["error"]


def test_host_service_with_nothing_listening_says_so(gate: Gate) -> None:
    port = int(gate.gate.policy.host_services[0].port)
    answer = json.loads(exchange(gate, b"", port=port))
    assert answer == {"ok": False, "error": f"nothing answers on the host's 127.0.0.1:{port}"}


def test_post_body_with_content_length_reaches_the_destination(gate: Gate, app_port: int) -> None:
    body = b"x" * 100_000
    status, answer = proxy(
        gate,
        b"POST http://app.test:%d/upload HTTP/1.1\r\nHost: app.test:%d\r\n"
        b"Content-Length: %d\r\nProxy-Authorization: Basic c2VjcmV0\r\n\r\n"
        % (app_port, app_port, len(body))
        + body,
    )
    assert status == b"HTTP/1.0 200 OK" or status == b"HTTP/1.1 200 OK"
    report = json.loads(answer)
    assert report["path"] == "/upload"
    assert report["body_sha256"] == hashlib.sha256(body).hexdigest()
    names = {name.lower() for name, _ in report["headers"]}
    assert "proxy-authorization" not in names


def test_chunked_body_is_forwarded_chunked(gate: Gate, app_port: int) -> None:
    status, answer = proxy(
        gate,
        b"POST http://app.test:%d/c HTTP/1.1\r\nHost: app.test:%d\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        % (app_port, app_port),
    )
    assert b"200" in status
    assert json.loads(answer)["body_sha256"] == hashlib.sha256(b"hello world").hexdigest()


@pytest.mark.parametrize(
    ("request_bytes", "status", "fragment"),
    [
        (b"GET / HTTP/1.1\r\nHost: app.test\r\n\r\n", b"400", b"needs an absolute http:// URL"),
        (b"GET https://app.test/ HTTP/1.1\r\nHost: app.test\r\n\r\n", b"400", b"through CONNECT"),
        (b"GET http://u:p@app.test/ HTTP/1.1\r\nHost: app.test\r\n\r\n", b"400", b"user info"),
        (
            b"GET http://public.test/ HTTP/1.1\r\nHost: public.test\r\nHost: x\r\n\r\n",
            b"400",
            b"expected one Host header, got 2",
        ),
        (b"CONNECT public.test HTTP/1.1\r\nHost: public.test\r\n\r\n", b"400", b"needs a port"),
        (b"GET http://public.test/ HTTP/1.1\nHost: x\n\n", b"400", b"malformed HTTP message"),
        (
            b"GET http://public.test/ HTTP/1.1\r\nHost: public.test\r\n\r\n",
            b"403",
            b"public.test resolves to 127.0.0.1 (loopback)",
        ),
        (
            b"CONNECT nowhere.test:443 HTTP/1.1\r\nHost: nowhere.test:443\r\n\r\n",
            b"403",
            b"nowhere.test is not in the allowlist",
        ),
    ],
)
def test_proxy_refusals(gate: Gate, request_bytes: bytes, status: bytes, fragment: bytes) -> None:
    line, body = proxy(gate, request_bytes)
    assert line.split()[1] == status
    assert fragment in body


@pytest.mark.parametrize(
    ("request_bytes", "hint"),
    [
        (
            b"CONNECT Nowhere.TEST:443 HTTP/1.1\r\nHost: nowhere.test:443\r\n\r\n",
            b'; or ask the owner from inside: sandbridge-allow nowhere.test:443 --reason "..."',
        ),
        (
            b"GET http://nowhere.test:8080/ HTTP/1.1\r\nHost: nowhere.test:8080\r\n\r\n",
            b'sandbridge-allow nowhere.test:8080 --reason "..."',
        ),
        (
            b"CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n",
            b'sandbridge-allow [2001:db8::1]:443 --reason "..."',
        ),
    ],
)
def test_a_refusal_an_entry_would_lift_says_how_to_ask(
    gate: Gate, request_bytes: bytes, hint: bytes
) -> None:
    line, body = proxy(gate, request_bytes)
    assert line.startswith(b"HTTP/1.1 403 ")
    assert body.rstrip().endswith(hint)
    assert b"sandbridge-allow" in line  # the reason phrase too, for clients that hide bodies


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET http://public.test/ HTTP/1.1\r\nHost: public.test\r\n\r\n",  # loopback
        b"CONNECT 100.64.0.1:443 HTTP/1.1\r\nHost: 100.64.0.1:443\r\n\r\n",  # the gate
    ],
)
def test_a_refusal_no_request_can_lift_does_not_offer_one(gate: Gate, request_bytes: bytes) -> None:
    line, body = proxy(gate, request_bytes)
    assert line.startswith(b"HTTP/1.1 403 ")
    assert b"sandbridge-allow" not in body


def test_every_decision_is_logged_without_payload(gate: Gate, app_port: int) -> None:
    proxy(
        gate,
        b"POST http://app.test:%d/p HTTP/1.1\r\nHost: app.test:%d\r\nContent-Length: 11\r\n"
        b"Cookie: session=topsecret\r\n\r\npayload-abc" % (app_port, app_port),
    )
    proxy(gate, b"CONNECT nowhere.test:443 HTTP/1.1\r\nHost: nowhere.test:443\r\n\r\n")
    entries = read_entries(gate.log_dir)
    assert [(e["decision"], e["kind"], e["destination"]) for e in entries] == [
        ("allowed", "proxy", f"app.test:{app_port}"),
        ("refused", "proxy", "nowhere.test:443"),
    ]
    assert entries[0]["address"] == "127.0.0.1"
    text = (gate.log_dir / "egress.jsonl").read_text()
    assert "topsecret" not in text and "payload-abc" not in text


def test_connections_past_the_cap_are_refused_and_others_recover(
    gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbridge.egress import gate as egress_gate

    monkeypatch.setattr(egress_gate, "MAX_EGRESS_CONNECTIONS", 8)
    silent = []
    try:
        for _ in range(8):
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(str(gate.path))
            silent.append(sock)
        # The gate has accepted the silent ones once it answers a probe past them.
        answer = json.loads(exchange(gate, b""))
        assert answer == {"ok": False, "error": "more than 8 open connections"}
    finally:
        for sock in silent:
            sock.close()
    status, _ = proxy(gate, b"CONNECT nowhere.test:443 HTTP/1.1\r\nHost: nowhere.test:443\r\n\r\n")
    assert b"403" in status


@pytest.mark.parametrize(
    ("address", "local"),
    [("127.0.0.1", True), ("192.0.2.1", False), ("2001:db8::1", False)],
)
def test_an_address_is_the_hosts_if_it_can_be_bound(address: str, local: bool) -> None:
    from sandbridge.egress.gate import is_local_address

    assert is_local_address(ipaddress.ip_address(address)) is local


def test_closing_the_gate_ends_an_idle_tunnel(gate: Gate) -> None:
    port = gate.gate.policy.host_services[0].port
    with (
        socket.create_server(("127.0.0.1", port)) as idle_service,
        socket.socket(socket.AF_UNIX) as client,
    ):
        client.settimeout(15)
        client.connect(str(gate.path))
        client.sendall(encode_open(port))
        assert client.recv(100) == b'{"ok":true}\n'
        service_end, _ = idle_service.accept()
        with service_end:
            gate.stop()
            assert not gate.running
            assert client.recv(100) == b""
            service_end.settimeout(15)
            assert service_end.recv(100) == b""
    # The handler returned by itself: nothing was left for asyncio to cancel and report.
    assert gate.errors == []


def test_the_summary_counts_destinations_and_names_the_line_for_each_refusal(
    gate: Gate, app_port: int
) -> None:
    for _ in range(2):
        proxy(gate, b"CONNECT nowhere.test:443 HTTP/1.1\r\nHost: nowhere.test:443\r\n\r\n")
    _, refusal = proxy(gate, b"CONNECT nowhere.test:443 HTTP/1.1\r\nHost: nowhere.test:443\r\n\r\n")
    proxy(gate, b"GET http://public.test/ HTTP/1.1\r\nHost: public.test\r\n\r\n")
    exchange(gate, b"", port=22)
    proxy(
        gate,
        b"GET http://app.test:%d/ HTTP/1.1\r\nHost: app.test:%d\r\n\r\n" % (app_port, app_port),
    )
    rows = {(r["decision"], r["destination"]): r for r in gate.gate.summary()}
    nowhere = rows[("refused", "nowhere.test:443")]
    assert nowhere["count"] == 3 and nowhere["line"] == "nowhere.test"
    assert f"add the line '{nowhere['line']}'".encode() in refusal  # the line the 403 named
    assert rows[("refused", "public.test:80")]["line"] == "public.test private"
    assert rows[("refused", "100.64.0.1:22")]["line"] == "100.64.0.1:22"
    allowed = rows[("allowed", f"app.test:{app_port}")]
    assert allowed["count"] == 1 and allowed["line"] is None
