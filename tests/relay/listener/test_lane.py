"""The keep-alive lane of the host relay (:class:`sandbridge.relay.listener.lane.KeepAliveLane`).

After the first request of a browser connection, small bodiless exchanges are relayed
from the event loop's callbacks; everything else hands the connection back to its task
at exactly the point where the lane stopped. These tests drive every such hand-back
with a scripted app (a real TCP server whose connections run a script) behind the real
host and shim, and check what the browser gets and what the app sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbridge.aio import event_loop
from sandbridge.protocol.http.parser import MESSAGE_END, ResponseReader
from sandbridge.relay.host.channel import READ_BYTES, Channel
from sandbridge.relay.host.settings import RelaySettings, SessionScope
from sandbridge.relay.host.upstream import UpstreamConnector
from sandbridge.relay.listener.app_listener import AppListener
from sandbridge.relay.listener.lane import KeepAliveLane
from tests.conftest import Relay, app_host, host_field, host_port_of, module_relay
from tests.protocol.http.test_exchange import CASES, HOST

Script = Callable[[socket.socket, "ScriptedApp"], None]


class ScriptedApp:
    """An app on 127.0.0.1 whose every accepted connection runs ``script`` in a thread."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.requests: list[bytes] = []
        self.go = threading.Event()  # the test tells the script to go on
        self.closed_by_relay = threading.Event()
        self.arrived = threading.Semaphore(0)  # released once per request read
        self._threads: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            thread = threading.Thread(target=self._run, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _run(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            self.script(conn, self)

    def read_request(self, conn: socket.socket) -> bytes | None:
        """One bodiless request head; ``None`` when the relay closed the connection."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                self.closed_by_relay.set()
                return None
            data += chunk
        self.requests.append(data)
        self.arrived.release()
        return data

    def close(self) -> None:
        self.server.close()


def ok(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body


def answer_first(conn: socket.socket, app: ScriptedApp) -> None:
    """The first exchange of a connection: after it, the relay keeps the connection."""
    app.read_request(conn)
    conn.sendall(ok(b"first"))


def answer_each(conn: socket.socket, app: ScriptedApp) -> None:
    """Answer every request with its own request line."""
    while (request := app.read_request(conn)) is not None:
        conn.sendall(ok(request.split(b"\r\n", 1)[0]))


@pytest.fixture
def scripted(request: pytest.FixtureRequest) -> Iterator[Callable[[Script], ScriptedApp]]:
    apps: list[ScriptedApp] = []

    def make(script: Script) -> ScriptedApp:
        app = ScriptedApp(script)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


@pytest.fixture(scope="module")
def fast_relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relay]:
    """A relay with short header and response timeouts and a long keep-alive."""
    timeouts = ("--header-timeout", "1", "--response-timeout", "1", "--keepalive-timeout", "60")
    with module_relay(tmp_path_factory, host_args=timeouts) as relay:
        yield relay


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relay]:
    """One relay for the module: each test registers apps of its own."""
    with module_relay(tmp_path_factory) as relay:
        yield relay


class Browser:
    """A raw keep-alive browser connection that reads responses by Content-Length."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection((app_host(port), port), timeout=10)
        self.buffer = b""

    def send(self, target: str = "/", extra: str = "") -> None:
        self.sock.sendall(self.head(target, extra))

    def head(self, target: str = "/", extra: str = "") -> bytes:
        host = host_field(self.port)
        return b"GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (target.encode(), host, extra.encode())

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            if not self._fill():
                raise ConnectionError(f"closed mid-head after {self.buffer!r}")
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines[1:])
        length = int(headers.get("Content-Length", "0"))
        while len(self.buffer) < length:
            if not self._fill():
                raise ConnectionError("closed mid-body")
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(lines[0].split()[1]), headers, body

    def get(self, target: str = "/", extra: str = "") -> tuple[int, dict[str, str], bytes]:
        self.send(target, extra)
        return self.response()

    def closed(self) -> bool:
        """Whether the relay closed the connection (after what is buffered)."""
        return not self._fill()

    def close(self) -> None:
        self.sock.close()


def kept_browser(relay: Relay, app: ScriptedApp) -> Browser:
    """A browser connection to ``app`` past its first exchange (:func:`answer_first`)."""
    browser = Browser(host_port_of(relay.register(app.port)))
    assert browser.get()[2] == b"first"
    return browser


def test_keep_alive_requests_share_one_app_connection(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    app = scripted(answer_each)
    browser = Browser(host_port_of(relay.register(app.port)))
    for index in range(300):
        status, headers, body = browser.get(f"/n/{index}?q={index}")
        assert (status, body) == (200, f"GET /n/{index}?q={index} HTTP/1.1".encode())
        assert headers["Connection"] == "keep-alive"
    assert app.connections == 1
    # every request reached the app with the relay's own forwarding fields
    assert all(b"\r\nX-Forwarded-For: 127.0.0.1\r\n" in request for request in app.requests)
    browser.close()


def test_response_spread_over_reads_is_relayed_whole(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    def script(conn: socket.socket, app: ScriptedApp) -> None:
        answer_first(conn, app)
        assert app.read_request(conn) is not None
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello")
        app.go.wait(10)  # the browser has the first half: the relay passed it on alone
        conn.sendall(b"world")
        answer_each(conn, app)

    app = scripted(script)
    browser = kept_browser(relay, app)
    browser.send("/second")
    while b"hello" not in browser.buffer:
        assert browser._fill()
    app.go.set()
    assert browser.response()[2] == b"helloworld"
    assert browser.get("/third")[2] == b"GET /third HTTP/1.1"
    assert app.connections == 1
    browser.close()


def test_interim_response_on_a_kept_connection_is_relayed(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    def script(conn: socket.socket, app: ScriptedApp) -> None:
        answer_first(conn, app)
        app.read_request(conn)
        conn.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" + ok(b"x"))
        answer_each(conn, app)

    app = scripted(script)
    browser = kept_browser(relay, app)
    status, headers, _ = browser.get("/hints")
    assert (status, headers["Link"]) == (103, "</a.css>; rel=preload")
    assert browser.response()[:3:2] == (200, b"x")
    assert browser.get("/after")[2] == b"GET /after HTTP/1.1"
    browser.close()


class CaseApp:
    """Answers ``/case/<n>`` with the response of the n-th case of the table (closing
    after it if the case says so), anything else with :func:`ok`; records which app
    connection served which target."""

    def __init__(self, scripted: Callable[[Script], ScriptedApp]) -> None:
        self.served: dict[bytes, int] = {}
        self.app = scripted(self._serve)

    def _serve(self, conn: socket.socket, app: ScriptedApp) -> None:
        connection = app.connections
        while (request := app.read_request(conn)) is not None:
            target = request.split(b" ", 2)[1]
            self.served[target] = connection
            if not target.startswith(b"/case/"):
                conn.sendall(ok(b"warm"))
                continue
            case = list(CASES.values())[int(target.removeprefix(b"/case/"))]
            conn.sendall(case.response)
            if case.app_closes:
                return

    @staticmethod
    def target(name: str) -> bytes:
        return b"/case/%d" % list(CASES).index(name)

    def request(self, name: str, browser: Browser) -> bytes:
        """The case's request for this browser, to its ``/case/<n>``."""
        method, rest = CASES[name].request.split(b" / ", 1)
        host = b"Host: " + host_field(browser.port) + b"\r\n"
        return method + b" " + self.target(name) + b" " + rest.replace(HOST, host)


def raw_response(browser: Browser, method: bytes) -> bytes:
    """One response as the browser received it, byte for byte (nothing is pipelined)."""
    reader, received = ResponseReader(method), b""
    while True:
        if not browser.buffer and not browser._fill():
            events = reader.feed_eof()
        else:
            data, browser.buffer = browser.buffer, b""
            received += data
            events = reader.feed(data)
        if MESSAGE_END in events:
            return received


def answer_and_what_follows(case_app: CaseApp, name: str, browser: Browser) -> tuple[bytes, str]:
    """Send the case's request; return what the browser received for it and what the
    relay did after: closed the browser connection, or served the next request on the
    same app connection or on a new one."""
    case = CASES[name]
    browser.sock.sendall(case_app.request(name, browser))
    received = raw_response(browser, case.request.split(b" ", 1)[0])
    with contextlib.suppress(ConnectionError):
        browser.send("/next")
    try:
        status = browser.response()[0]
    except ConnectionError:  # an end of stream or a reset
        return received, "browser closed"
    assert status == 200
    same = case_app.served[b"/next"] == case_app.served[case_app.target(name)]
    return received, "app connection reused" if same else "new app connection"


@pytest.mark.parametrize("name", CASES.keys())
def test_lane_and_task_answer_each_framing_case_alike(
    relay: Relay, scripted: Callable[[Script], ScriptedApp], name: str
) -> None:
    """The same request as a connection's first (the task relays it) and after a first
    exchange (the lane relays it, or hands it to the task): the same bytes, and the
    connections go on the same way, as the table of the response decision says."""
    case_app = CaseApp(scripted)
    port = host_port_of(relay.register(case_app.app.port))
    first = Browser(port)
    by_task = answer_and_what_follows(case_app, name, first)
    kept = Browser(port)
    assert kept.get("/warm")[2] == b"warm"
    by_lane = answer_and_what_follows(case_app, name, kept)
    assert by_lane == by_task
    case = CASES[name]
    assert by_task[0] == case.browser_gets
    if not case.keep_browser:
        assert by_task[1] == "browser closed"
    elif case.reuse_upstream:
        assert by_task[1] == "app connection reused"
    else:
        assert by_task[1] == "new app connection"
    first.close()
    kept.close()


def test_app_silent_on_a_kept_connection_is_502_after_the_response_timeout(
    fast_relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    def script(conn: socket.socket, app: ScriptedApp) -> None:
        answer_first(conn, app)
        app.read_request(conn)
        app.read_request(conn)  # never answers; returns once the relay gives up

    app = scripted(script)
    browser = kept_browser(fast_relay, app)
    started = time.monotonic()
    status, headers, body = browser.get("/silent")
    assert status == 502
    assert b"app sent no response within 1 s" in body
    assert headers["Connection"] == "close"
    assert time.monotonic() - started < 30  # the response timeout, not the keep-alive one
    assert browser.closed()
    assert app.closed_by_relay.wait(10)
    browser.close()


def test_head_begun_on_a_kept_connection_gets_408_within_the_header_timeout(
    fast_relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    app = scripted(answer_each)
    browser = Browser(host_port_of(fast_relay.register(app.port)))
    assert browser.get()[0] == 200
    started = time.monotonic()
    browser.sock.sendall(b"GET /slow HTTP/1.1\r\nHost: " + host_field(browser.port)[:9])
    status, _, body = browser.response()
    assert status == 408
    assert b"request head not complete within 1 s" in body
    assert time.monotonic() - started < 30  # not the 60 s keep-alive timeout first
    browser.close()


def test_head_split_over_writes_on_a_kept_connection_is_served(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    app = scripted(answer_each)
    browser = Browser(host_port_of(relay.register(app.port)))
    assert browser.get()[0] == 200
    head = browser.head("/split")
    browser.sock.sendall(head[:10])
    # the relay keeps its half (no answer, no close) until the rest arrives
    browser.sock.sendall(head[10:])
    assert browser.response()[2] == b"GET /split HTTP/1.1"
    assert browser.get("/next")[2] == b"GET /next HTTP/1.1"
    browser.close()


def test_pipelined_requests_on_a_kept_connection_are_answered_in_order(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    app = scripted(answer_each)
    browser = Browser(host_port_of(relay.register(app.port)))
    assert browser.get()[0] == 200
    browser.sock.sendall(b"".join(browser.head(f"/p/{index}") for index in range(20)))
    for index in range(20):
        assert browser.response()[2] == f"GET /p/{index} HTTP/1.1".encode()
    assert browser.get("/after")[2] == b"GET /after HTTP/1.1"
    browser.close()


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n", 421),
        (b"GET /\x01 HTTP/1.1\r\nHost: HOST\r\n\r\n", 400),
        (b"GET http://x/ HTTP/1.1\r\nHost: HOST\r\n\r\n", 400),
        (b"DELETE / HTTP/1.1\r\nHost: HOST\r\nOrigin: http://evil.example\r\n\r\n", 403),
    ],
)
def test_bad_request_on_a_kept_connection_is_refused_as_on_a_new_one(
    relay: Relay, scripted: Callable[[Script], ScriptedApp], request_bytes: bytes, status: int
) -> None:
    app = scripted(answer_each)
    browser = Browser(host_port_of(relay.register(app.port)))
    assert browser.get()[0] == 200
    browser.sock.sendall(request_bytes.replace(b"HOST", host_field(browser.port)))
    assert browser.response()[0] == status
    assert browser.closed()
    assert len(app.requests) == 1  # nothing of the refused request reached the app
    browser.close()


def test_app_bytes_between_requests_are_never_taken_for_a_response(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    def script(conn: socket.socket, app: ScriptedApp) -> None:
        if app.connections == 1:
            app.read_request(conn)
            conn.sendall(ok(b"first"))
            app.go.wait(10)
            conn.sendall(ok(b"forged"))  # answers nothing: no request is in flight
            app.read_request(conn)  # returns once the relay drops this connection
        else:
            answer_each(conn, app)

    app = scripted(script)
    browser = kept_browser(relay, app)
    app.go.set()
    assert app.closed_by_relay.wait(10)
    assert browser.get("/second")[2] == b"GET /second HTTP/1.1"
    assert app.connections == 2
    browser.close()


def test_upgrade_on_a_kept_connection_becomes_a_tunnel(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    def script(conn: socket.socket, app: ScriptedApp) -> None:
        answer_first(conn, app)
        app.read_request(conn)
        conn.sendall(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n"
        )
        while data := conn.recv(65536):
            conn.sendall(data.upper())

    app = scripted(script)
    browser = kept_browser(relay, app)
    assert browser.get("/ws", "Connection: Upgrade\r\nUpgrade: x\r\n")[0] == 101
    browser.sock.sendall(b"tunnelled bytes")
    while b"TUNNELLED BYTES" not in browser.buffer:
        assert browser._fill()
    browser.close()


def test_upload_on_a_kept_connection_reaches_the_app(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    def script(conn: socket.socket, app: ScriptedApp) -> None:
        answer_first(conn, app)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < 100_000:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        conn.sendall(ok(b"%d" % len(data.split(b"\r\n\r\n", 1)[1])))

    app = scripted(script)
    browser = kept_browser(relay, app)
    browser.sock.sendall(
        b"POST /up HTTP/1.1\r\nHost: %s\r\nContent-Length: 100000\r\n\r\n"
        % host_field(browser.port)
        + b"u" * 100_000
    )
    assert browser.response()[2] == b"100000"
    browser.close()


def test_private_app_cookie_is_checked_on_every_kept_request(
    runtime_dir: Path, scripted: Callable[[Script], ScriptedApp]
) -> None:
    relay = Relay(runtime_dir, host_args=("--private",))
    try:
        app = scripted(answer_each)
        url = relay.register(app.port)
        browser = Browser(host_port_of(url))
        token_path = "/" + url.split("/", 3)[3]
        status, headers, _ = browser.get(token_path)
        assert status == 303
        cookie = headers["Set-Cookie"].split(";", 1)[0]
        for index in range(5):
            status, _, body = browser.get(f"/c/{index}", f"Cookie: {cookie}\r\n")
            assert (status, body) == (200, f"GET /c/{index} HTTP/1.1".encode())
        assert all(b"sandbridge_" not in request for request in app.requests)
        assert browser.get("/no-cookie")[0] == 403
        assert browser.closed()
        browser.close()
    finally:
        relay.stop()


@pytest.mark.parametrize("kept", [False, True], ids=["first-request", "kept-connection"])
def test_browser_reset_before_the_response_costs_nothing_else(
    runtime_dir: Path, scripted: Callable[[Script], ScriptedApp], kept: bool
) -> None:
    relay = Relay(runtime_dir)  # its own: the test stops its host to read all it said
    try:

        def script(conn: socket.socket, app: ScriptedApp) -> None:
            if kept:
                app.read_request(conn)
                conn.sendall(ok(b"first"))
            app.read_request(conn)
            app.go.wait(10)  # the browser is gone by now
            conn.sendall(ok(b"late"))
            app.read_request(conn)  # returns once the relay drops this connection

        app = scripted(
            lambda conn, app: (answer_each if app.connections > 1 else script)(conn, app)
        )
        port = host_port_of(relay.register(app.port))
        browser = Browser(port)
        if kept:
            assert browser.get()[2] == b"first"
        browser.send("/late")
        for _ in range(1 + kept):
            assert app.arrived.acquire(timeout=10)  # the app has the request
        browser.sock.setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
        )
        browser.close()  # a reset, not a close
        app.go.set()
        assert app.closed_by_relay.wait(10)
        other = Browser(port)
        assert other.get("/other")[2] == b"GET /other HTTP/1.1"
        other.close()
        stop_and_stderr = relay.host.stop(), relay.host.drain("stderr")
        assert "Traceback" not in stop_and_stderr[1], stop_and_stderr[1]
    finally:
        relay.stop()


def test_pipelined_head_begun_behind_a_request_gets_the_header_timeout(
    fast_relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    app = scripted(answer_each)
    browser = Browser(host_port_of(fast_relay.register(app.port)))
    assert browser.get()[0] == 200
    started = time.monotonic()
    browser.sock.sendall(browser.head("/whole") + b"GET /begun HTTP/1.1\r\nHost: 127")
    assert browser.response()[2] == b"GET /whole HTTP/1.1"
    status, _, body = browser.response()
    assert status == 408
    assert b"request head not complete within 1 s" in body
    assert time.monotonic() - started < 30  # not the 60 s keep-alive timeout first
    browser.close()


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1])


def test_app_answering_without_reading_cannot_pile_requests_up_in_the_host(
    relay: Relay, scripted: Callable[[Script], ScriptedApp]
) -> None:
    """An app that answers each request without reading it: the host must not keep every
    head it could not deliver (60 KiB each here); it drops that app connection instead."""
    cue = threading.Semaphore(0)

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        if app.connections > 1:
            answer_each(conn, app)
            return
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        answer_first(conn, app)
        while cue.acquire(timeout=10):  # answers on cue, never reads again
            conn.sendall(ok(b"unread"))

    app = scripted(script)
    browser = kept_browser(relay, app)
    before = _rss_kib(relay.host.popen.pid)
    pad = "X-Pad: " + "p" * 60_000 + "\r\n"
    for _ in range(300):
        browser.send("/big", pad)
        if app.connections == 1:
            cue.release()
        assert browser.response()[0] == 200
    grown = _rss_kib(relay.host.popen.pid) - before
    assert grown < 8 * 1024, f"host grew by {grown} KiB for 18 MB of undelivered heads"
    assert app.connections > 1
    browser.close()


def test_private_token_request_with_a_body_that_never_comes_gets_408(
    runtime_dir: Path, scripted: Callable[[Script], ScriptedApp]
) -> None:
    relay = Relay(runtime_dir, host_args=("--private", "--header-timeout", "1"))
    try:
        app = scripted(answer_each)
        url = relay.register(app.port)
        browser = Browser(host_port_of(url))
        started = time.monotonic()
        browser.send("/" + url.split("/", 3)[3], "Content-Length: 5\r\n")
        status, _, body = browser.response()
        assert status == 408
        assert b"request not complete within 1 s" in body
        assert time.monotonic() - started < 30
        assert app.requests == []
        browser.close()
    finally:
        relay.stop()


class _TcpConnector(UpstreamConnector):
    """Opens plain TCP connections to the app: the in-process listener's upstream."""

    def __init__(self, app_port: int) -> None:
        super().__init__(Path("/nonexistent"))
        self.app_port = app_port

    async def open(self, port: int) -> tuple[Channel, bytes] | None:
        loop = asyncio.get_running_loop()
        _, channel = await loop.create_connection(
            lambda: Channel(READ_BYTES), "127.0.0.1", self.app_port
        )
        return channel, b""


def test_request_arriving_as_the_keep_alive_timeout_fires_never_reaches_the_app(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """Bytes that reach the lane in the loop turn in which the idle timeout fired come
    too late: the connection closes as on any idle timeout, and the app never sees
    them (it used to run the request, and the browser got a 502 for it)."""
    app = scripted(answer_each)

    async def main() -> bytes:
        settings = RelaySettings(keepalive_timeout=0.5, response_timeout=30)
        listener = AppListener(app.port, "/", _TcpConnector(app.port), SessionScope(settings))
        port = await listener.start()
        lanes: list[KeepAliveLane] = []
        run = KeepAliveLane.run

        async def spy(lane: KeepAliveLane, upstream: Any) -> Any:
            lanes.append(lane)
            return await run(lane, upstream)

        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        host = f"Host: {listener.origin.hostname}:{port}\r\n\r\n".encode()  # type: ignore[union-attr]
        try:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(KeepAliveLane, "run", spy)
                writer.write(b"GET /first HTTP/1.1\r\n" + host)
                await reader.readuntil(b"GET /first HTTP/1.1")
                for _ in range(10_000):  # loop turns, until the lane waits for a request
                    if lanes and lanes[0]._browser.channel.lane is not None:
                        break
                    await asyncio.sleep(0)
                assert lanes and lanes[0]._browser.channel.lane is not None
            lane = lanes[0]
            watchdog = lane._browser.watchdog

            def arrive() -> None:  # the transport's read callback in the timer's turn
                assert watchdog.expired
                lane._browser.channel.data_received(b"DELETE /item/7 HTTP/1.1\r\n" + host)

            loop.call_at(watchdog._when, arrive)
            return await reader.read()
        finally:
            writer.close()
            await listener.close()

    assert event_loop.run(main()) == b""  # closed, no answer
    assert app.closed_by_relay.wait(10)  # (what the app got before the close is all it gets)
    assert [request.split(b"\r\n")[0] for request in app.requests] == [b"GET /first HTTP/1.1"]
