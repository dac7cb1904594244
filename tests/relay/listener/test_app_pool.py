"""App connections left idle by finished browser connections
(:mod:`sandbridge.relay.listener.app_pool`).

A real host and shim in front of a scripted app (a real TCP server whose connections
run a script); each test opens browser connections one after the other, as a client
that opens a connection per request does, and checks which app connection each
request reached.
"""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import Relay, host_port_of, module_relay
from tests.relay.listener.test_lane import (
    Browser,
    Script,
    ScriptedApp,
    answer_each,
    ok,
    scripted,
)

__all__ = ["scripted"]  # the fixture, used by name


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relay]:
    """One relay for the module: each test registers apps of its own."""
    with module_relay(tmp_path_factory) as relay:
        yield relay


def one_request(host_port: int, target: str = "/", method: str = "GET") -> bytes:
    """One request on a browser connection of its own, with ``Connection: close``: the
    relay closes it after the response, once it has parked the app connection, so the
    next one finds it there. (A browser that closes first races the next connection.)"""
    browser = Browser(host_port)
    try:
        head = browser.head(target, "Connection: close\r\n")
        browser.sock.sendall(head.replace(b"GET", method.encode(), 1))
        status, _, body = browser.response()
        assert status == 200, body
        assert browser.closed()
        return body
    finally:
        browser.close()


@pytest.fixture
def short_pool(runtime_dir: Path) -> Iterator[Relay]:
    """A relay that keeps idle app connections for 0.5 s."""
    relay = Relay(runtime_dir, host_args=("--app-pool-idle", "0.5"))
    yield relay
    relay.stop()


def test_a_new_browser_connection_takes_the_app_connection_a_finished_one_left(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    app = scripted(answer_each)
    origin = host_port_of(relay.register(app.port))
    for index in range(20):
        assert one_request(origin, f"/n/{index}") == f"GET /n/{index} HTTP/1.1".encode()
    assert app.connections == 1  # twenty browser connections, one app connection


def test_a_parked_connection_the_app_closes_unanswered_sends_the_request_again(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    """The app's own keep-alive timeout fires as the parked connection is reused: the
    request (a GET: it may go twice) goes out once more on a new connection; the
    browser sees only the answer."""

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        if app.connections == 1:
            app.read_request(conn)
            conn.sendall(ok(b"first"))
            app.read_request(conn)  # the second browser's request: closed unanswered
            return
        answer_each(conn, app)

    app = scripted(script)
    origin = host_port_of(relay.register(app.port))
    assert one_request(origin, "/one") == b"first"
    assert one_request(origin, "/again") == b"GET /again HTTP/1.1"
    assert app.connections == 2
    assert [r.split(b"\r\n", 1)[0] for r in app.requests] == [
        b"GET /one HTTP/1.1",
        b"GET /again HTTP/1.1",
        b"GET /again HTTP/1.1",
    ]


def _closes_the_second_request_unanswered(conn: socket.socket, app: ScriptedApp) -> None:
    """The first app connection answers one request, then reads the next and closes
    (its keep-alive timeout as the request came); later ones answer every request."""
    if app.connections == 1:
        app.read_request(conn)
        conn.sendall(ok(b"first"))
        app.read_request(conn)
        return
    answer_each(conn, app)


@pytest.mark.parametrize("pipelined", [False, True], ids=["one-by-one", "pipelined"])
def test_a_kept_connection_the_app_closes_unanswered_sends_the_request_again(
    relay: Relay, scripted: Callable[[Script], ScriptedApp], pipelined: bool
) -> None:
    """The same on the app connection a browser connection keeps between its own
    requests: a GET the app closed its connection on goes once more on a new one, and
    the browser connection goes on. (Pipelined, the second request is the connection's
    task's; one by one, usually the lane's.)"""
    app = scripted(_closes_the_second_request_unanswered)
    browser = Browser(host_port_of(relay.register(app.port)))
    try:
        if pipelined:
            browser.sock.sendall(browser.head("/one") + browser.head("/again"))
            assert browser.response()[2] == b"first"
        else:
            assert browser.get("/one")[2] == b"first"
            browser.send("/again")
        assert browser.response()[2] == b"GET /again HTTP/1.1"
        assert browser.get("/then")[2] == b"GET /then HTTP/1.1"
    finally:
        browser.close()
    assert app.connections == 2
    assert [r.split(b"\r\n", 1)[0] for r in app.requests] == [
        b"GET /one HTTP/1.1",
        b"GET /again HTTP/1.1",
        b"GET /again HTTP/1.1",
        b"GET /then HTTP/1.1",
    ]


def test_a_kept_connection_the_app_closes_after_several_exchanges_sends_the_request_again(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    """The app closes its connection on the browser connection's fifth request, past the
    lane's first exchanges (whose answers went to the browser): that request, too, goes
    once more, and the browser connection goes on."""

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        if app.connections == 1:
            for _ in range(4):
                request = app.read_request(conn)
                assert request is not None
                conn.sendall(ok(request.split(b"\r\n", 1)[0]))
            app.read_request(conn)  # the fifth: closed unanswered
            return
        answer_each(conn, app)

    app = scripted(script)
    browser = Browser(host_port_of(relay.register(app.port)))
    try:
        for index in range(6):
            assert browser.get(f"/n/{index}")[2] == f"GET /n/{index} HTTP/1.1".encode()
    finally:
        browser.close()
    assert app.connections == 2
    assert [r.split(b"\r\n", 1)[0] for r in app.requests].count(b"GET /n/4 HTTP/1.1") == 2


def test_a_request_whose_interim_response_reached_the_browser_is_not_sent_again(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    """A 103 went to the browser before the app closed the kept connection: the GET is
    not repeated (the browser saw part of an answer), it gets the 502."""

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        app.read_request(conn)
        conn.sendall(ok(b"first"))
        app.read_request(conn)
        conn.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")

    app = scripted(script)
    browser = Browser(host_port_of(relay.register(app.port)))
    try:
        # Pipelined: the second request is the connection's task's (the lane hands an
        # interim response to the task, with what it read of the response).
        browser.sock.sendall(browser.head("/one") + browser.head("/hinted"))
        assert browser.response()[2] == b"first"
        assert browser.response()[0] == 103
        assert browser.response()[0] == 502
    finally:
        browser.close()
    assert app.connections == 1


def test_a_request_that_may_not_go_twice_on_a_kept_connection_the_app_closes_is_a_502(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    """A DELETE is not sent twice: the app closing its connection on it is a 502."""
    app = scripted(_closes_the_second_request_unanswered)
    browser = Browser(host_port_of(relay.register(app.port)))
    try:
        assert browser.get("/one")[2] == b"first"
        browser.sock.sendall(browser.head("/gone").replace(b"GET", b"DELETE", 1))
        assert browser.response()[0] == 502
    finally:
        browser.close()
    assert app.connections == 1


def test_a_request_that_may_not_go_twice_opens_its_own_app_connection(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    """Only GET, HEAD and OPTIONS without a body take a parked connection: a DELETE
    could not be sent again if the app closed the parked one, so it never gets one."""
    app = scripted(answer_each)
    origin = host_port_of(relay.register(app.port))
    one_request(origin, "/get")
    assert one_request(origin, "/gone", method="DELETE") == b"DELETE /gone HTTP/1.1"
    assert app.connections == 2
    # the GET's connection was still parked; the DELETE's joins it
    one_request(origin, "/get-again")
    assert app.connections == 2


def test_a_parked_connection_the_app_closed_or_wrote_to_is_never_handed_out(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    closed, wrote = threading.Event(), threading.Event()

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        number = app.connections
        if number == 1:
            app.read_request(conn)
            conn.sendall(ok(b"first"))
            app.go.wait(10)
            conn.shutdown(socket.SHUT_WR)
            closed.set()
            app.read_request(conn)  # until the relay lets go of it
            return
        if number == 2:
            app.read_request(conn)
            conn.sendall(ok(b"second"))
            app.go.wait(10)
            conn.sendall(ok(b"forged"))  # answers nothing: no request is in flight
            wrote.set()
            app.read_request(conn)
            return
        answer_each(conn, app)

    app = scripted(script)
    origin = host_port_of(relay.register(app.port))
    assert one_request(origin) == b"first"
    app.go.set()
    assert closed.wait(10)
    # the relay sees the end of stream in its own time: wait until it let go of it
    assert app.closed_by_relay.wait(10)
    app.closed_by_relay.clear()
    app.go.clear()
    assert one_request(origin) == b"second"
    app.go.set()
    assert wrote.wait(10)
    # a connection with unread bytes is dropped when taken, never read as a response
    assert one_request(origin, "/third") == b"GET /third HTTP/1.1"
    assert app.connections == 3


def test_a_parked_connection_is_closed_after_the_idle_time(
    short_pool: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    app = scripted(answer_each)
    origin = host_port_of(short_pool.register(app.port))
    one_request(origin)
    parked_at = time.monotonic()
    assert app.closed_by_relay.wait(10)
    waited = time.monotonic() - parked_at
    assert 0.4 <= waited < 5, waited


def test_an_app_serving_one_connection_at_a_time_keeps_working(
    short_pool: Relay,
) -> None:
    """A single-threaded HTTP/1.1 server (the stdlib's, keep-alive on): sequential
    browser connections are served on the parked connection, and a client of its own
    (the agent's curl inside the sandbox) is served once the idle time is over."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            body = self.path.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)  # one connection at a time
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        origin = host_port_of(short_pool.register(port))
        for index in range(5):
            assert one_request(origin, f"/{index}") == f"/{index}".encode()
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as direct:
            direct.sendall(b"GET /direct HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := direct.recv(65536):
                answer += chunk
        assert answer.endswith(b"/direct")
        assert time.monotonic() - started < 5
    finally:
        server.shutdown()
        server.server_close()


def test_no_pool_when_the_owner_turns_it_off(
    runtime_dir: Path, scripted: Callable[[Script], ScriptedApp]
) -> None:
    relay = Relay(runtime_dir, host_args=("--app-pool-size", "0"))
    try:
        app = scripted(answer_each)
        origin = host_port_of(relay.register(app.port))
        for _ in range(3):
            one_request(origin)
        assert app.connections == 3
    finally:
        relay.stop()


@pytest.fixture
def quick_relay(runtime_dir: Path) -> Iterator[Relay]:
    """A relay whose apps have 1 s to start a response."""
    relay = Relay(runtime_dir, host_args=("--response-timeout", "1"))
    yield relay
    relay.stop()


def test_a_first_request_sent_on_a_parked_connection_gets_502_if_the_app_stays_silent(
    quick_relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    """A new connection's first request goes to a parked app connection before the
    connection's task exists; an app that never answers it still costs only a 502 after
    the response timeout, and the relay serves the next connection."""

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        if app.connections == 1:
            app.read_request(conn)
            conn.sendall(ok(b"first"))
            app.read_request(conn)  # the second browser's: never answered
            app.read_request(conn)  # until the relay lets go of it
            return
        answer_each(conn, app)

    app = scripted(script)
    origin = host_port_of(quick_relay.register(app.port))
    assert one_request(origin, "/one") == b"first"
    browser = Browser(origin)
    try:
        started = time.monotonic()
        status, headers, body = browser.get("/silent")
        assert status == 502
        assert b"app sent no response within 1 s" in body
        assert headers["Connection"] == "close"
        assert time.monotonic() - started < 30
        assert browser.closed()
    finally:
        browser.close()
    assert app.closed_by_relay.wait(10)
    assert one_request(origin, "/next") == b"GET /next HTTP/1.1"


def test_bytes_behind_a_first_request_in_flight_wait_for_its_response(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    """A browser that sends its next request while the first one (sent on a parked app
    connection before the connection's task existed) waits for its response gets both
    answers, in order."""

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        if app.connections == 1:
            app.read_request(conn)
            conn.sendall(ok(b"first"))
            request = app.read_request(conn)
            app.go.wait(10)  # the test has sent the next request meanwhile
            assert request is not None
            conn.sendall(ok(request.split(b"\r\n", 1)[0]))
        answer_each(conn, app)

    app = scripted(script)
    origin = host_port_of(relay.register(app.port))
    assert one_request(origin, "/one") == b"first"
    browser = Browser(origin)
    try:
        browser.send("/slow")
        assert app.arrived.acquire(timeout=10)  # /one
        assert app.arrived.acquire(timeout=10)  # /slow, on the parked connection
        browser.send("/behind")
        app.go.set()
        assert browser.response()[2] == b"GET /slow HTTP/1.1"
        assert browser.response()[2] == b"GET /behind HTTP/1.1"
    finally:
        browser.close()
    assert app.connections == 1
