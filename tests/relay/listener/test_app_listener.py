"""The host relay's data path over real sockets: host -> upstream.sock -> shim -> app."""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.aio import event_loop
from sandbridge.protocol.http.origin_policy import AppOrigin, new_label
from sandbridge.relay.host.settings import ForwardingMode
from sandbridge.relay.host.upstream import UpstreamConnector
from sandbridge.relay.listener.app_listener import AppListener
from tests.conftest import (
    Relay,
    app_host,
    echo,
    free_port,
    host_field,
    host_port_of,
    module_relay,
    raw_exchange,
    request,
)


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relay]:
    """One relay for the module: each test registers apps of its own."""
    with module_relay(tmp_path_factory) as relay:
        yield relay


@pytest.fixture(scope="module")
def app_port(shared_app_port: int) -> int:
    return shared_app_port


def test_request_reaches_the_app_with_its_path_and_query(relay: Relay, app_port: int) -> None:
    port = host_port_of(relay.register(app_port))
    report = echo(port, "/media?path=a/b.mp4&session=s1")
    assert report["path"] == "/media?path=a/b.mp4&session=s1"
    assert report["server_port"] == app_port


def test_each_registration_gets_a_new_host_port(relay: Relay, app_port: int) -> None:
    first, second = relay.register(app_port), relay.register(app_port)
    assert first != second
    assert echo(host_port_of(first))["server_port"] == echo(host_port_of(second))["server_port"]


def test_listener_binds_loopback_only(relay: Relay, app_port: int) -> None:
    port = host_port_of(relay.register(app_port))
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    listening = [row[1] for row in rows if row[3] == "0A" and int(row[1].split(":")[1], 16) == port]
    assert listening == [f"0100007F:{port:04X}"]


def test_many_requests_on_one_keep_alive_connection(relay: Relay, app_port: int) -> None:
    port = host_port_of(relay.register(app_port))
    conn = http.client.HTTPConnection(app_host(port), port, timeout=10)
    local_ports = set()
    for index in range(200):
        conn.request("GET", f"/n/{index}")
        response = conn.getresponse()
        assert json.loads(response.read())["path"] == f"/n/{index}"
        assert conn.sock is not None
        local_ports.add(conn.sock.getsockname()[1])
    assert len(local_ports) == 1
    conn.close()


def test_content_length_upload_arrives_intact(relay: Relay, app_port: int) -> None:
    port = host_port_of(relay.register(app_port))
    body = bytes(range(256)) * 40_000
    report = echo(port, "/upload", method="POST", body=body)
    assert report["body_len"] == len(body)
    assert report["body_sha256"] == hashlib.sha256(body).hexdigest()


def test_chunked_upload_arrives_intact(relay: Relay, app_port: int) -> None:
    port = host_port_of(relay.register(app_port))
    parts = [b"a" * 1000, b"b" * 70_000, b"c"]
    conn = http.client.HTTPConnection(app_host(port), port, timeout=10)
    conn.request("POST", "/upload", body=iter(parts), encode_chunked=True)
    report = json.loads(conn.getresponse().read())
    assert report["body_sha256"] == hashlib.sha256(b"".join(parts)).hexdigest()
    assert ["Transfer-Encoding", "chunked"] in report["headers"]


def test_large_download_streams_complete(relay: Relay, app_port: int) -> None:
    port = host_port_of(relay.register(app_port))
    size = 64 * 1024 * 1024 + 17
    conn = http.client.HTTPConnection(app_host(port), port, timeout=30)
    conn.request("GET", f"/bytes?n={size}")
    response = conn.getresponse()
    digest, total = hashlib.sha256(), 0
    while chunk := response.read(1 << 20):
        digest.update(chunk)
        total += len(chunk)
    block = bytes(range(256)) * 256
    expected = hashlib.sha256()
    for offset in range(0, size, len(block)):
        expected.update(block[: min(len(block), size - offset)])
    assert total == size
    assert digest.hexdigest() == expected.hexdigest()


def test_chunked_response_is_relayed_chunked(relay: Relay, app_port: int) -> None:
    port = host_port_of(relay.register(app_port))
    status, headers, body = request(port, path="/chunked?part=x&part=yy")
    assert (status, body) == (200, b"xyy")
    assert headers["Transfer-Encoding"] == "chunked"


def test_close_delimited_response_reaches_a_keep_alive_browser(relay: Relay, app_port: int) -> None:
    port = host_port_of(relay.register(app_port))
    conn = http.client.HTTPConnection(app_host(port), port, timeout=10)
    conn.request("GET", "/close-delimited")
    assert conn.getresponse().read() == b"until close"
    conn.request("GET", "/after")
    assert json.loads(conn.getresponse().read())["path"] == "/after"


def test_head_response_has_no_body(relay: Relay, app_port: int) -> None:
    port = host_port_of(relay.register(app_port))
    conn = http.client.HTTPConnection(app_host(port), port, timeout=10)
    conn.request("HEAD", "/styles.css")
    response = conn.getresponse()
    assert response.getheader("Content-Length") == "29"
    assert response.read() == b""
    conn.request("GET", "/styles.css")
    assert conn.getresponse().read() == b"body { color: rgb(1, 2, 3); }"


def test_no_content_and_not_modified_have_no_body(relay: Relay, app_port: int) -> None:
    port = host_port_of(relay.register(app_port))
    for code in (204, 304):
        status, _, body = request(port, path=f"/status?code={code}")
        assert (status, body) == (code, b"")


def test_base_path_cases_of_the_contract(relay: Relay, app_port: int) -> None:
    url = relay.register(app_port, "/app")
    assert url.endswith("/app")
    port = host_port_of(url)
    cases = {
        "/app": "/app",
        "/app/": "/app/",
        "/app?x=1": "/app?x=1",
        "/styles.css": "/app/styles.css",
        "/app/styles.css": "/app/styles.css",
        "/": "/app/",
    }
    for sent, seen in cases.items():
        if sent.endswith("styles.css"):
            status, _, body = request(port, path=sent)
            assert status == 200 and body.startswith(b"body"), sent
        else:
            assert echo(port, sent)["path"] == seen, sent


def test_registered_port_with_nothing_listening_is_502_for_that_request_only(
    relay: Relay, app_port: int
) -> None:
    dead = host_port_of(relay.register(free_port()))
    live = host_port_of(relay.register(app_port))
    conn = http.client.HTTPConnection(app_host(dead), dead, timeout=10)
    conn.request("GET", "/")
    response = conn.getresponse()
    assert response.status == 502
    assert b"could not reach sandbox port" in response.read()
    conn.request("GET", "/again")
    assert conn.getresponse().status == 502
    assert echo(live, "/still-fine")["path"] == "/still-fine"


def test_request_with_foreign_host_is_refused(relay: Relay, app_port: int) -> None:
    port = host_port_of(relay.register(app_port))
    answer = raw_exchange(port, b"GET / HTTP/1.1\r\nHost: attacker.example\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 421 ")


def test_malformed_request_is_400_and_the_relay_stays_up(relay: Relay, app_port: int) -> None:
    port = host_port_of(relay.register(app_port))
    answer = raw_exchange(port, b"GET / HTTP/1.1\nHost: x\n\n")
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert echo(port)["path"] == "/"


def test_pipelined_requests_get_answers_in_order(relay: Relay, app_port: int) -> None:
    port = host_port_of(relay.register(app_port))
    host = b"Host: " + host_field(port) + b"\r\n"
    with socket.create_connection((app_host(port), port), timeout=10) as sock:
        sock.sendall(
            b"GET /one HTTP/1.1\r\n" + host + b"\r\n"
            b"GET /two HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n"
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.index(b'"/one"') < data.index(b'"/two"')


def test_an_app_brought_back_keeps_its_port_and_name_unless_the_port_is_taken() -> None:
    async def main() -> None:
        connector = UpstreamConnector(Path("/nonexistent"), ForwardingMode.STREAM)
        origin = AppOrigin(free_port(), new_label())
        first = AppListener(80, "/", connector)
        assert await first.start(origin) == origin.host_port
        assert first.origin == origin
        # The port is held (by the first): the second gets a new port and a new name.
        second = AppListener(80, "/", connector)
        assert await second.start(origin) != origin.host_port
        assert second.origin is not None and second.origin.label != origin.label
        await first.close()
        await second.close()

    event_loop.run(main())
