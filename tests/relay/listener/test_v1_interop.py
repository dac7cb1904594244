"""Interop both ways with peers that speak only forwarding v1 (written from the contract)."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.protocol.limits import MAX_V1_BODY_BYTES
from tests.conftest import PYTHON, REPO, Relay, echo, host_port_of, module_relay, request

V1_SHIM = [PYTHON, str(REPO / "tests" / "peers" / "v1_shim.py")]


@pytest.fixture(scope="module")
def v1_relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relay]:
    with module_relay(tmp_path_factory, shim=V1_SHIM, shim_ready="v1 shim listening") as relay:
        yield relay


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relay]:
    """One relay for the module: each test registers apps of its own."""
    with module_relay(tmp_path_factory) as relay:
        yield relay


@pytest.fixture(scope="module")
def app_port(shared_app_port: int) -> int:
    return shared_app_port


def test_host_falls_back_to_v1_and_serves_the_app(v1_relay: Relay, app_port: int) -> None:
    port = host_port_of(v1_relay.register(app_port))
    assert echo(port, "/a?b=1")["path"] == "/a?b=1"
    assert "upstream.v1_fallback" in v1_relay.host.wait_line("sandbridge: upstream.v1", "stderr")


def test_v1_carries_bodies_and_base_paths(v1_relay: Relay, app_port: int) -> None:
    port = host_port_of(v1_relay.register(app_port, "/app"))
    body = b"x" * 300_000
    report = echo(port, "/upload", method="POST", body=body)
    assert report["path"] == "/app/upload"
    assert report["body_sha256"] == hashlib.sha256(body).hexdigest()
    status, headers, css = request(port, path="/styles.css")
    assert (status, css) == (200, b"body { color: rgb(1, 2, 3); }")
    assert headers["Content-Length"] == str(len(css))


def test_websocket_over_a_v1_shim_is_501_naming_why(v1_relay: Relay, app_port: int) -> None:
    port = host_port_of(v1_relay.register(app_port))
    status, _, body = request(port, headers={"Connection": "Upgrade", "Upgrade": "websocket"})
    assert status == 501
    assert b"stream mode" in body


def _v1_host_exchange(socket_path: Path, message: dict[str, object]) -> dict[str, object]:
    """A v1-only host, from the contract: one JSON line out, one JSON line back."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(30)
        sock.connect(str(socket_path))
        sock.sendall(json.dumps(message).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    answer: dict[str, object] = json.loads(data)
    return answer


def test_sandbridge_shim_answers_the_contract_request(relay: Relay, app_port: int) -> None:
    answer = _v1_host_exchange(
        relay.runtime_dir / "upstream.sock",
        {
            "type": "http_request",
            "port": app_port,
            "base_path": "/app",
            "method": "GET",
            "path": "/styles.css?theme=dark",
            "headers": [["accept", "text/css"], ["host", "127.0.0.1:1"]],
            "body_base64": None,
        },
    )
    assert answer["ok"] is True
    assert answer["status"] == 200
    assert answer["reason"] == "OK"
    assert ["Content-Type", "text/css; charset=utf-8"] in answer["headers"]  # type: ignore[operator]
    assert base64.b64decode(str(answer["body_base64"])) == b"body { color: rgb(1, 2, 3); }"


# Bodies up to the v1 limit: a v1 request line far over the 1 MiB of other messages.
@pytest.mark.parametrize("body", [b"hello", b"y" * (MAX_V1_BODY_BYTES - 1024)], ids=["5B", "limit"])
def test_sandbridge_shim_applies_the_base_path_and_carries_the_body(
    relay: Relay, app_port: int, body: bytes
) -> None:
    answer = _v1_host_exchange(
        relay.runtime_dir / "upstream.sock",
        {
            "type": "http_request",
            "port": app_port,
            "base_path": "/app",
            "method": "POST",
            "path": "/submit",
            "headers": [["host", "127.0.0.1:1"], ["content-type", "text/plain"]],
            "body_base64": base64.b64encode(body).decode(),
        },
    )
    report = json.loads(base64.b64decode(str(answer["body_base64"])))
    assert report["path"] == "/app/submit"
    assert report["body_sha256"] == hashlib.sha256(body).hexdigest()


def test_sandbridge_shim_refuses_a_bad_v1_request_as_the_contract_says(relay: Relay) -> None:
    answer = _v1_host_exchange(
        relay.runtime_dir / "upstream.sock",
        {"type": "http_request", "port": 0, "method": "GET", "path": "/", "headers": []},
    )
    assert answer["ok"] is False
    assert "got 0" in str(answer["error"])


def test_sandbridge_shim_reports_an_unreachable_app(relay: Relay) -> None:
    answer = _v1_host_exchange(
        relay.runtime_dir / "upstream.sock",
        {
            "type": "http_request",
            "port": 1,
            "base_path": "/",
            "method": "GET",
            "path": "/",
            "headers": [],
            "body_base64": None,
        },
    )
    assert answer["ok"] is False
    assert answer["error"] == (
        "connect to 127.0.0.1:1 failed: [Errno 111] Connection refused; "
        "connect to [::1]:1 failed: [Errno 111] Connection refused"
    )


def test_sandbridge_shim_answers_v1_for_an_app_on_any_loopback_address(
    relay: Relay, loopback_app: tuple[str, int]
) -> None:
    answer = _v1_host_exchange(
        relay.runtime_dir / "upstream.sock",
        {
            "type": "http_request",
            "port": loopback_app[1],
            "base_path": "/",
            "method": "GET",
            "path": "/styles.css",
            "headers": [],
            "body_base64": None,
        },
    )
    assert answer["ok"] is True, answer
    assert base64.b64decode(str(answer["body_base64"])) == b"body { color: rgb(1, 2, 3); }"


def test_sandbridge_shim_drops_what_connection_names_from_a_v1_request(
    relay: Relay, app_port: int
) -> None:
    answer = _v1_host_exchange(
        relay.runtime_dir / "upstream.sock",
        {
            "type": "http_request",
            "port": app_port,
            "base_path": "/",
            "method": "GET",
            "path": "/echo",
            "headers": [["connection", "x-hop"], ["x-hop", "1"], ["x-kept", "2"]],
            "body_base64": None,
        },
    )
    names = {
        name.lower()
        for name, _ in json.loads(base64.b64decode(str(answer["body_base64"])))["headers"]
    }
    assert "x-kept" in names
    assert "x-hop" not in names
