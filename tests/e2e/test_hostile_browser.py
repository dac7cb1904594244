"""Browser-side threats against app origins of a real sandbox session (docs/security.md)."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import (
    ECHO_APP,
    PYTHON,
    Process,
    app_host,
    host_field,
    host_port_of,
    raw_exchange,
    request,
    run_argv,
)


class Session:
    def __init__(self, workdir: Path, *options: str) -> None:
        self.process = Process(
            run_argv(
                workdir,
                PYTHON,
                ECHO_APP,
                "--register",
                "4173",
                "--register",
                "4174",
                options=options,
            )
        )
        report = json.loads(self.process.wait_line("READY").removeprefix("READY "))
        self.urls: list[str] = report["urls"]
        self.port = host_port_of(self.urls[0])
        self.api_port = host_port_of(self.urls[1])


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    running = Session(tmp_path_factory.mktemp("hostile"), "--header-timeout", "1")
    yield running
    running.process.stop()


def head(port: int, lines: str = "", method: str = "GET", target: str = "/") -> bytes:
    host = host_field(port).decode()
    return f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n{lines}\r\n".encode()


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


# --- DNS rebinding --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("evil.example:{port}", 421),
        ("127.0.0.1:{port}", 421),
        ("localhost:{port}", 421),
        ("[::1]:{port}", 421),
        ("127.0.0.1:{other}", 421),
        ("127.0.0.2:{port}", 421),
        ("127.0.0.1", 421),
        ("{name}", 421),
        ("{name}:{other}", 421),
        ("{other_name}:{port}", 421),
        ("x.{name}:{port}", 421),
        ("evil.localhost:{port}", 421),
        ("127.0.0.1:{port}@evil.example", 400),
        ("", 400),
    ],
)
def test_foreign_host_is_refused_without_naming_the_app(
    session: Session, host: str, status: int
) -> None:
    name, other_name = app_host(session.port), app_host(session.api_port)
    value = host.format(port=session.port, other=session.api_port, name=name, other_name=other_name)
    answer = raw_exchange(session.port, f"GET / HTTP/1.1\r\nHost: {value}\r\n\r\n".encode())
    assert status_of(answer) == status
    # A DNS-rebinding page can read the refusal: it must not learn the app's name.
    label = name.split(".")[0].encode()
    assert label not in answer.lower().replace(value.lower().encode(), b"")


def test_missing_and_duplicate_host_are_400(session: Session) -> None:
    assert status_of(raw_exchange(session.port, b"GET / HTTP/1.1\r\n\r\n")) == 400
    duplicate = head(session.port, f"Host: {app_host(session.port)}:{session.port}\r\n")
    assert status_of(raw_exchange(session.port, duplicate)) == 400


def test_the_apps_own_name_is_served_in_any_case(session: Session) -> None:
    for name in (app_host(session.port), app_host(session.port).upper()):
        status, _, _ = request(session.port, headers={"Host": f"{name}:{session.port}"})
        assert status == 200, name


@pytest.fixture(scope="module")
def ip_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """The accepted contract's URL form, chosen with ``--url-form ip``."""
    running = Session(tmp_path_factory.mktemp("hostile-ip"), "--url-form", "ip")
    yield running
    running.process.stop()


def test_ip_form_urls_are_the_contract_urls(ip_session: Session) -> None:
    assert ip_session.urls[0] == f"http://127.0.0.1:{ip_session.port}/"


@pytest.mark.parametrize("name", ["localhost", "[::1]", "127.0.0.1", "LOCALHOST"])
def test_ip_form_serves_every_loopback_name_of_the_app(ip_session: Session, name: str) -> None:
    status, _, _ = request(ip_session.port, headers={"Host": f"{name}:{ip_session.port}"})
    assert status == 200


def test_ip_form_same_session_origins_may_post(ip_session: Session) -> None:
    port, api_port = ip_session.port, ip_session.api_port
    for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{api_port}"):
        status, _, _ = request(port, "POST", "/x", body=b"a", headers={"Origin": origin})
        assert status == 200, origin


# --- cross-site requests ---------------------------------------------------------------


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1:1"])
def test_cross_site_unsafe_request_is_403(session: Session, origin: str) -> None:
    status, _, body = request(session.port, "POST", "/x", body=b"a", headers={"Origin": origin})
    assert status == 403, body


def test_cross_site_websocket_upgrade_is_403(session: Session) -> None:
    answer = raw_exchange(
        session.port,
        head(
            session.port,
            "Connection: Upgrade\r\nUpgrade: websocket\r\n"
            "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Origin: http://evil.example\r\n",
        ),
    )
    assert status_of(answer) == 403


def test_same_session_origins_may_post(session: Session) -> None:
    for port in (session.port, session.api_port):
        origin = f"http://{app_host(port)}:{port}"
        status, _, _ = request(session.port, "POST", "/x", body=b"a", headers={"Origin": origin})
        assert status == 200, origin


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "evil.localhost"])
def test_loopback_origins_other_than_the_apps_names_may_not_post(
    session: Session, name: str
) -> None:
    origin = f"http://{name}:{session.api_port}"
    status, _, body = request(session.port, "POST", "/x", body=b"a", headers={"Origin": origin})
    assert status == 403, body


def test_cross_site_safe_request_is_served(session: Session) -> None:
    status, _, _ = request(session.port, headers={"Origin": "http://evil.example"})
    assert status == 200


# --- not a proxy ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "target", "status"),
    [
        ("GET", "http://example.com/", 400),
        ("GET", "example.com:443", 400),
        ("CONNECT", "example.com:443", 405),
        ("OPTIONS", "*", 400),
    ],
)
def test_proxy_requests_are_refused(
    session: Session, method: str, target: str, status: int
) -> None:
    answer = raw_exchange(session.port, head(session.port, method=method, target=target))
    assert status_of(answer) == status


# --- request framing ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (
            b"POST / HTTP/1.1\r\nHost: H\r\nContent-Length: 3\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        (b"POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501),
        (b"GET / HTTP/1.1\r\nHost: H\r\nX-A: a\r\n folded\r\n\r\n", 400),
        (b"GET / HTTP/1.1\nHost: H\n\n", 400),
        (b"GET / HTTP/1.1\r\nHost: H\r\nBad Name: a\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: H\r\nX-A: a\x00b\r\n\r\n", 400),
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: H\r\n\r\n", 414),
        (b"GET / HTTP/1.1\r\nHost: H\r\n" + b"X-N: v\r\n" * 101 + b"\r\n", 431),
        (b"GET / HTTP/1.1\r\nHost: H\r\nX-Big: " + b"b" * 70000 + b"\r\n\r\n", 431),
    ],
)
def test_bad_framing_is_refused_and_the_connection_closed(
    session: Session, raw: bytes, status: int
) -> None:
    raw = raw.replace(b"Host: H", b"Host: " + host_field(session.port))
    answer = raw_exchange(session.port, raw)  # returns only once the relay closes
    assert status_of(answer) == status
    assert answer.count(b"HTTP/1.1 ") == 1


def test_hop_by_hop_and_forwarding_headers_never_reach_the_app(session: Session) -> None:
    _status, _, body = request(
        session.port,
        headers={
            "Connection": "X-Private",
            "X-Private": "secret",
            "Keep-Alive": "timeout=5",
            "Proxy-Authorization": "Basic eA==",
            "X-Forwarded-For": "6.6.6.6",
            "X-Forwarded-Host": "evil.example",
            "Forwarded": "for=6.6.6.6",
            "X-Real-IP": "6.6.6.6",
            "X-Kept": "yes",
        },
    )
    headers = {name.lower(): value for name, value in json.loads(body)["headers"]}
    for dropped in ("x-private", "keep-alive", "proxy-authorization", "forwarded", "x-real-ip"):
        assert dropped not in headers
    assert headers["x-forwarded-for"] == "127.0.0.1"
    assert headers["x-forwarded-host"] == host_field(session.port).decode()
    assert headers["x-forwarded-proto"] == "http"
    assert headers["x-kept"] == "yes"


# --- resource limits ----------------------------------------------------------------------


def test_slowloris_head_gets_408_within_the_header_timeout(session: Session) -> None:
    with socket.create_connection(("127.0.0.1", session.port), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(b"GET / HTTP/1.1\r\nHost: " + host_field(session.port)[:-1])
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
            sock.send(b"1")  # a byte now and then: not enough to finish the head
        assert status_of(answer) == 408
        assert time.monotonic() - started < 5


def test_a_browser_gone_mid_body_frees_its_exchange_at_once(tmp_path: Path) -> None:
    """A client that sends part of a declared body and closes can never complete its
    request: the app's connection is dropped then, not after the response timeout (the
    app would wait for the rest, holding a connection on both sides per such client)."""
    session = Session(tmp_path, "--response-timeout", "60")
    try:
        host_pid = session.process.popen.pid

        def descriptors() -> int:
            return len(os.listdir(f"/proc/{host_pid}/fd"))

        # The first app connection starts the socket minter, which keeps descriptors of
        # its own: its channel, and sockets ready for the next app connections (up to
        # POOL_SIZE, refilled when half are taken). Counted after one exchange, so that
        # only what these five exchanges hold can show above it.
        warm = raw_exchange(session.port, head(session.port, "Connection: close\r\n"))
        assert status_of(warm) == 200
        before = descriptors()
        started = time.monotonic()
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", session.port), timeout=10) as sock:
                sock.sendall(
                    head(session.port, "Content-Length: 1000000\r\n", "POST", "/upload")
                    + b"x" * 10_000
                )
        # Observation with a deadline far below the response timeout, not a sleep.
        while descriptors() > before and time.monotonic() - started < 10:
            time.sleep(0.05)
        assert descriptors() <= before, f"{descriptors()} descriptors, {before} before"
        assert (
            status_of(raw_exchange(session.port, head(session.port, "Connection: close\r\n")))
            == 200
        )
    finally:
        session.process.stop()


def test_connection_caps_per_app_and_per_session(tmp_path: Path) -> None:
    capped = Session(tmp_path, "--max-connections-per-app", "3", "--max-connections", "4")
    try:
        held = [socket.create_connection(("127.0.0.1", capped.port)) for _ in range(3)]
        for sock in held:  # each connection is served: the relay has accepted it
            sock.sendall(head(capped.port, "Connection: keep-alive\r\n"))
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
        assert status_of(raw_exchange(capped.port, head(capped.port))) == 503
        held.append(socket.create_connection(("127.0.0.1", capped.api_port)))
        held[-1].sendall(head(capped.api_port, "Connection: keep-alive\r\n"))
        assert held[-1].recv(4096).startswith(b"HTTP/1.1 200 ")
        assert status_of(raw_exchange(capped.api_port, head(capped.api_port))) == 503
        for sock in held:
            sock.close()
        # Closed connections give their places back.
        _wait_until_served(capped.port)
    finally:
        capped.process.stop()


def _wait_until_served(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if status_of(raw_exchange(port, head(port, "Connection: close\r\n"))) == 200:
            return
    raise AssertionError("closed connections were not given back")


# --- private sessions -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    running = Session(tmp_path_factory.mktemp("private"), "--private")
    yield running
    running.process.stop()


def test_private_url_carries_a_token(private: Session) -> None:
    assert "?sandbridge_token=" in private.urls[0]


def test_private_app_refuses_requests_without_the_cookie(private: Session) -> None:
    status, _, body = request(private.port, path="/")
    assert status == 403
    assert b"private" in body


def test_token_is_exchanged_once_for_an_http_only_cookie(private: Session) -> None:
    target = private.urls[1].split(str(private.api_port), 1)[1]
    status, headers, _ = request(private.api_port, path=target + "&keep=1")
    assert status == 303
    assert headers["Location"] == "/?keep=1"
    cookie = headers["Set-Cookie"]
    assert cookie.startswith(f"sandbridge_{private.api_port}=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    pair = cookie.split(";")[0]
    status, _, body = request(
        private.api_port, path="/seen", headers={"Cookie": f"theme=dark; {pair}"}
    )
    assert status == 200
    cookies = [v for k, v in json.loads(body)["headers"] if k.lower() == "cookie"]
    assert cookies == ["theme=dark"]
    assert request(private.api_port, path=target)[0] == 403  # used up
    assert request(private.port, headers={"Cookie": pair})[0] == 403  # another app's cookie


def test_wrong_token_is_refused(private: Session) -> None:
    assert request(private.port, path="/?sandbridge_token=guess")[0] == 403
