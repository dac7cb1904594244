"""The relay's C front door (relay/front/_front_*.c, relay/front/front.py) in real
``sandbridge run`` sessions: it really serves new connections without waking the relay's
Python, every response it gives is the one the Python relay gives (``--no-front-door``),
what it cannot state exactly goes to the Python relay whole, and nothing it holds
outlives its session.

The app (tests/apps/front_app.py) answers exact bytes chosen by path; each request here
is raw bytes on a raw socket, and each answer is compared byte for byte, with the one
session's host names and ports put in neutral form."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbridge.relay.front import _front
from sandbridge.relay.front import front as front_py
from sandbridge.relay.front._front import FRESH, Handoff
from sandbridge.relay.front.front import front_door, listening_socket
from sandbridge.relay.host.channel import READ_BYTES, Channel
from sandbridge.relay.host.settings import RelaySettings, SessionScope
from sandbridge.relay.host.upstream import UpstreamConnection
from sandbridge.relay.listener import connection_stage
from tests.conftest import PYTHON, REPO, Process, run_argv

FRONT_APP = str(REPO / "tests" / "apps" / "front_app.py")
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
# New connections a test makes to see which thread served them: enough that the event
# loop's wake-ups for its own timers, and for the few connections the front hands over
# (a new connection may come before the last one's end gave its app connection back),
# cannot pass for serving them all (each wakes it at least once).
CONNECTIONS = 40
# The per-app connection limit of the limited session (--max-connections-per-app).
LIMIT = 4
# The limited session's keep-alive timeout (--keepalive-timeout): short, to see it end.
KEEPALIVE = 2
# Connections opened and dropped without a byte: most of the front's 1,024 places.
FLOOD = 1000
# App connections the pools may hold beyond what they held before a test (one a request
# took from the front's pool while the last browser connection still held its own, and
# one the Python relay opened for a handover meanwhile): not a leak.
POOLED = 2
BIG = bytes(range(256)) * 4096  # front_app.BIG


@dataclass
class Session:
    """A ``sandbridge run`` of the front app: its process (the host: relay and all)."""

    process: Process
    urls: dict[str, str]

    @property
    def pid(self) -> int:
        pid: int = self.process.popen.pid
        return pid

    def port(self, app: str = "root") -> int:
        port = urllib.parse.urlsplit(self.urls[app]).port
        assert port is not None
        return port

    def host(self, app: str = "root") -> bytes:
        parts = urllib.parse.urlsplit(self.urls[app])
        return f"{parts.hostname}:{parts.port}".encode()

    def neutral(self, data: bytes) -> bytes:
        """``data`` with this session's host names and ports in one form for all."""
        for app in ("root", "base"):
            name = urllib.parse.urlsplit(self.urls[app]).hostname
            assert name is not None
            data = data.replace(name.encode(), app.upper().encode() + b"-NAME")
            data = data.replace(b":%d" % self.port(app), b":" + app.upper().encode() + b"-PORT")
        return data.replace(b":%d" % int(self.urls["port"]), b":APP-PORT")

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def switches(self) -> dict[int, int]:
        """Context switches of each thread of the host, by thread id."""
        found = {}
        for task in os.listdir(f"/proc/{self.pid}/task"):
            with contextlib.suppress(OSError):
                status = Path(f"/proc/{self.pid}/task/{task}/status").read_text()
                found[int(task)] = sum(
                    int(line.split()[1]) for line in status.splitlines() if "ctxt_switches" in line
                )
        return found


@contextlib.contextmanager
def session(factory: pytest.TempPathFactory, *options: str) -> Iterator[Session]:
    top = factory.mktemp("front")
    work, xdg = top / "work", top / "xdg"
    work.mkdir()
    xdg.mkdir(mode=0o700)
    process = Process(
        run_argv(work, PYTHON, FRONT_APP, options=options),
        env={**os.environ, "XDG_RUNTIME_DIR": str(xdg)},
    )
    try:
        urls = json.loads(process.wait_line("READY ", timeout=60).removeprefix("READY "))
        urls["port"] = str(urls["port"])
        yield Session(process, urls)
    finally:
        try:
            process.stop()
        except subprocess.TimeoutExpired:
            process.popen.kill()
            process.popen.wait()


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    with session(tmp_path_factory) as served:
        yield served


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    with session(tmp_path_factory, "--no-front-door") as served:
        yield served


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    options = ("--max-connections-per-app", str(LIMIT), "--keepalive-timeout", str(KEEPALIVE))
    with session(tmp_path_factory, *options) as served:
        yield served


def host_connections(port: int) -> int:
    """Connections to loopback port ``port`` its listener's side still holds: established,
    or ended by the browser and not yet closed by the host (/proc/net/tcp, states 01
    and 08)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        count += int(local.split(":")[1], 16) == port and state in ("01", "08")
    return count


def holds_none(port: int) -> Callable[[], bool]:
    """Whether the host's side of every connection to ``port`` is closed (a condition)."""
    return lambda: host_connections(port) == 0


def closed_clients_of(port: int) -> int:
    """Client sockets to loopback port ``port`` that their process closed and the kernel
    keeps in TIME_WAIT: /proc/net/tcp rows whose remote end is the port."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        # (an orphan still shows its uid; TIME_WAIT shows uid 0, no inode)
        count += int(fields[2].split(":")[1], 16) == port and fields[7:10:2] == ["0", "0"]
    return count


def wait_until(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{condition} still false after {timeout}s"
        time.sleep(0.05)


# --- raw HTTP/1.1 on a socket ----------------------------------------------------------


class Wire:
    """One browser connection: raw requests out, whole raw responses in."""

    def __init__(self, served: Session, app: str = "root") -> None:
        self.served, self.app = served, app
        self.sock = socket.create_connection(("127.0.0.1", served.port(app)), timeout=15)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *_: object) -> None:
        self.sock.close()

    def request(
        self, method: bytes, target: bytes, fields: bytes = b"", body: bytes = b""
    ) -> bytes:
        """The bytes of a request as a browser sends it (``fields``: extra lines)."""
        length = b"Content-Length: %d\r\n" % len(body) if body else b""
        return (
            method + b" " + target + b" HTTP/1.1\r\nHost: " + self.served.host(self.app) + b"\r\n"
            b"User-Agent: front-test\r\nAccept: */*\r\n" + fields + length + b"\r\n" + body
        )

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _more(self) -> bytes:
        data = self.sock.recv(1 << 20)
        self.buffer += data
        return data

    def _take(self, count: int) -> bytes:
        while len(self.buffer) < count:
            assert self._more(), f"the connection ended {count - len(self.buffer)} bytes short"
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            assert self._more(), f"the connection ended within a line: {self.buffer!r}"
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line + b"\r\n"

    def head(self) -> bytes:
        while b"\r\n\r\n" not in self.buffer:
            assert self._more(), f"the connection ended within a head: {self.buffer!r}"
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        return head + b"\r\n\r\n"

    def response(self, method: bytes = b"GET") -> tuple[bytes, bytes]:
        """The next whole response: its head, and its body as framed on the wire."""
        head = self.head()
        status = int(head.split(b" ", 2)[1])
        fields = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(b":") for line in head.split(b"\r\n")[1:])
        }
        if method == b"HEAD" or status in (101, 204, 304):
            return head, b""
        if fields.get(b"transfer-encoding") == b"chunked":
            body = b""
            while True:
                size_line = self._line()
                size = int(size_line.split(b";")[0], 16)
                body += size_line + self._take(size + 2)
                if size == 0:
                    return head, body
        if b"content-length" in fields:
            return head, self._take(int(fields[b"content-length"]))
        while self._more():
            pass
        body, self.buffer = self.buffer, b""
        return head, body

    def ended(self) -> bool:
        """Whether the relay ends this connection (an end or a reset) with nothing more."""
        try:
            return self.sock.recv(65536) == b""
        except ConnectionResetError:
            return True


def exchange(
    served: Session,
    method: bytes,
    target: bytes,
    fields: bytes = b"",
    body: bytes = b"",
    app: str = "root",
) -> tuple[bytes, bytes]:
    """One request on a new connection: its response, in neutral form."""
    with Wire(served, app) as wire:
        wire.send(wire.request(method, target, fields, body))
        head, answer = wire.response(method)
    return served.neutral(head), served.neutral(answer)


def stats(served: Session) -> dict[str, object]:
    status_head, body = exchange(served, b"GET", b"/stats")
    assert status_head.startswith(b"HTTP/1.1 200 "), status_head
    assert body.startswith(b"{"), (status_head, body)
    found: dict[str, object] = json.loads(body)
    return found


def seen(served: Session, mark: str) -> int:
    counts = stats(served)["seen"]
    assert isinstance(counts, dict)
    return int(counts.get(mark, 0))


def warm(
    served: Session, method: bytes, target: bytes, fields: bytes = b"", app: str = "root"
) -> None:
    """The Python relay translates this block once: the front knows it from then on."""
    exchange(served, method, target, fields, app=app)


def python_wakeups(served: Session, action: Callable[[], None]) -> tuple[int, int]:
    """Context switches of the host's main thread (its event loop: the relay's Python)
    and of its other threads together, while ``action`` runs."""
    before = served.switches()
    action()
    after = served.switches()
    main = after[served.pid] - before[served.pid]
    others = sum(after[t] - before.get(t, 0) for t in after if t != served.pid)
    return main, others


# --- 1. the fast path is the C thread's ------------------------------------------------


def many_gets(served: Session) -> None:
    for _ in range(CONNECTIONS):
        head, body = exchange(served, b"GET", b"/plain")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and body == b"hello", (head, body)


def test_new_connections_with_a_known_request_are_served_without_the_relays_python(
    front: Session,
) -> None:
    for _ in range(2):
        warm(front, b"GET", b"/plain")
    accepts = stats(front)["accepts"]
    main, others = python_wakeups(front, lambda: many_gets(front))
    # The event loop slept through (almost) every connection; the front's thread served
    # them, on app connections it already held (a browser connection keeps its app
    # connection until its end is read, which may come after the next one's request).
    assert main < CONNECTIONS // 2, (main, others)
    assert others >= CONNECTIONS, (main, others)
    accepted = stats(front)["accepts"]
    assert isinstance(accepts, int) and isinstance(accepted, int)
    assert accepted - accepts < CONNECTIONS // 2, (accepts, accepted)


def test_a_burst_of_new_connections_past_the_pools_stays_the_fronts(front: Session) -> None:
    # More connections at once than the pools hold idle app connections (8): the front
    # keeps each request while the relay opens an app connection for it, and so keeps
    # every connection, where those past its pool were the relay's for good.
    burst = 24
    for _ in range(2):
        warm(front, b"GET", b"/plain")
    wires = [Wire(front) for _ in range(burst)]
    try:
        for wire in wires:  # every request out before any answer is read
            wire.send(wire.request(b"GET", b"/plain"))
        for wire in wires:
            assert wire.response()[1] == b"hello"

        def again() -> None:
            for wire in wires:
                wire.send(wire.request(b"GET", b"/plain"))
                assert wire.response()[1] == b"hello"

        main, others = python_wakeups(front, again)
        assert main < burst // 2, (main, others)  # (twice the burst when the relay has them)
    finally:
        for wire in wires:
            wire.sock.close()


def test_without_the_front_door_the_relays_python_serves_each_new_connection(
    plain: Session,
) -> None:
    for _ in range(2):
        warm(plain, b"GET", b"/plain")
    main, others = python_wakeups(plain, lambda: many_gets(plain))
    assert main >= CONNECTIONS, (main, others)


def test_a_second_request_on_a_connection_the_front_served_is_served_there_too(
    front: Session, plain: Session
) -> None:
    answers = []
    for served in (front, front, plain):
        warm(served, b"GET", b"/plain")
        with Wire(served) as wire:
            for target in (b"/plain", b"/cookie", b"/plain"):
                wire.send(wire.request(b"GET", target))
                answers.append(tuple(served.neutral(part) for part in wire.response()))
    assert answers[0:3] == answers[3:6] == answers[6:9]
    with Wire(front) as wire:
        wire.send(wire.request(b"GET", b"/plain"))
        wire.response()

        def next_two() -> None:
            for _ in range(2):
                wire.send(wire.request(b"GET", b"/plain"))
                assert wire.response()[1] == b"hello"

        main, _ = python_wakeups(front, next_two)
        assert main < 2, main


# --- 2. the same bytes as the Python relay's --------------------------------------------

WS_FIELDS = (
    b"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
)
CASES = {
    "get": (b"GET", b"/plain", b""),
    "head": (b"HEAD", b"/plain", b""),
    "options": (b"OPTIONS", b"/plain", b""),
    "request_as_received": (b"GET", b"/head?x=1", b""),
    "no_content_204": (b"GET", b"/nocontent", b""),
    "not_modified_304": (b"GET", b"/notmod", b'If-None-Match: "v1"\r\n'),
    "relay_cookie_dropped": (b"GET", b"/cookie", b""),
    "apps_referrer_policy_kept": (b"GET", b"/referrer", b""),
    "location_rewritten": (b"GET", b"/redirect", b""),
    "chunked": (b"GET", b"/chunked", b""),
    "close_delimited": (b"GET", b"/close", b""),
    "one_mib": (b"GET", b"/big", b""),
    "duplicate_content_length": (b"GET", b"/duplen", b""),
    "bytes_after_the_response": (b"GET", b"/trailing", b""),
    "slower_than_the_grace": (b"GET", b"/slow", b""),
    "headers_over_16_kib": (b"GET", b"/head", b"X-Big: " + b"b" * 17000 + b"\r\n"),
    "post_with_body": (b"POST", b"/echo", b"Content-Type: application/octet-stream\r\n"),
}


@pytest.mark.parametrize("app", ["root", "base"])
@pytest.mark.parametrize("case", list(CASES))
def test_every_response_is_the_python_relays_byte_for_byte(
    front: Session, plain: Session, case: str, app: str
) -> None:
    method, target, fields = CASES[case]
    body = b"posted \x00\xff bytes" * 100 if method == b"POST" else b""
    # First the Python relay's translation (which the front learns), then the front's.
    answers = [exchange(front, method, target, fields, body, app) for _ in range(3)]
    expected = exchange(plain, method, target, fields, body, app)
    assert answers == [expected] * 3
    head, answer = expected
    if case == "relay_cookie_dropped":
        assert b"sandbridge_x" not in head and b"Set-Cookie: own=1\r\n" in head
    if case == "apps_referrer_policy_kept":
        assert b"Referrer-Policy: no-referrer\r\n" in head and b"same-origin" not in head
    if case == "one_mib":
        assert answer == BIG
    if case == "post_with_body":
        assert answer == body
    if case == "headers_over_16_kib":
        assert b"X-Big: " + b"b" * 17000 in answer
    if case in ("get", "request_as_received") and app == "base":
        assert b"X-Path: /app/plain" in head or b"GET /app/head?x=1 " in answer


@pytest.mark.parametrize("app", ["root", "base"])
def test_a_root_absolute_and_a_based_path_reach_the_app_under_its_base(
    front: Session, app: str
) -> None:
    warm(front, b"GET", b"/plain", app=app)
    base = b"/app" if app == "base" else b""
    for target in (b"/plain", base + b"/plain"):
        head, _ = exchange(front, b"GET", target, app=app)
        assert b"\r\nX-Path: " + base + b"/plain\r\n" in head


def test_a_websocket_upgrade_is_relayed_and_its_bytes_copied_untouched(
    front: Session, plain: Session
) -> None:
    heads = []
    for served in (front, front, plain):
        with Wire(served) as wire:
            wire.send(wire.request(b"GET", b"/ws", WS_FIELDS))
            heads.append(served.neutral(wire.head()))
            frames = bytes(range(256)) * 64
            wire.send(frames)
            assert wire._take(len(frames)) == frames
    assert heads[0].startswith(b"HTTP/1.1 101 ") and heads[0] == heads[1] == heads[2]


def test_an_event_stream_is_flushed_event_by_event(front: Session, plain: Session) -> None:
    answers = []
    for served in (front, front, plain):
        with Wire(served) as wire:
            wire.send(wire.request(b"GET", b"/sse", b"Accept: text/event-stream\r\n"))
            head = wire.head()
            # The first event arrives while the app still holds the second back.
            while b"data: one" not in wire.buffer:
                assert wire._more(), head
            exchange(served, b"GET", b"/release")
            _, body = head, b""
            while b"0\r\n\r\n" not in wire.buffer:
                assert wire._more(), wire.buffer
            body = wire.buffer
            answers.append((served.neutral(head), body))
    assert answers[0] == answers[1] == answers[2]
    assert b"data: two" in answers[0][1]


def test_two_requests_in_one_write_are_both_answered_in_order(
    front: Session, plain: Session
) -> None:
    answers = []
    for served in (front, front, plain):
        warm(served, b"GET", b"/plain")
        with Wire(served) as wire:
            wire.send(wire.request(b"GET", b"/plain") + wire.request(b"GET", b"/referrer"))
            answers.append([served.neutral(b"".join(wire.response())) for _ in range(2)])
    assert answers[0] == answers[1] == answers[2]
    assert answers[0][0].endswith(b"hello") and answers[0][1].endswith(b"ref")


def test_a_request_sent_while_the_last_is_at_the_app_is_answered_after_it(
    front: Session, plain: Session
) -> None:
    # The front holds the browser's side in its epoll set, edge-triggered, while the
    # request is at the app: the edge of the next request then is remembered, and that
    # request served once the response went (not lost until the keep-alive timeout).
    answers = []
    for n, served in enumerate((front, front, plain)):
        warm(served, b"GET", b"/pause")
        warm(served, b"GET", b"/plain")
        mark = f"pause-{n}"
        with Wire(served) as wire:
            wire.send(wire.request(b"GET", f"/pause?id={mark}".encode()))
            wait_until(lambda: seen(served, mark) == 1)  # noqa: B023  (called here)
            wire.send(wire.request(b"GET", b"/plain"))
            head, body = wire.response()
            assert body == b"paused", (head, body)
            head, body = wire.response()
            assert body == b"hello", (head, body)
            answers.append(served.neutral(head))
    assert answers[0] == answers[1] == answers[2]


def test_a_request_split_across_two_writes_is_answered_once_whole(
    front: Session, plain: Session
) -> None:
    answers: list[bytes] = []
    for served in (front, front, plain):
        warm(served, b"GET", b"/plain")
        mark = f"split-{len(answers)}-{served.pid}"
        with Wire(served) as wire:
            data = wire.request(b"GET", f"/plain?id={mark}".encode())
            wire.send(data[:20])
            # Nothing answers half a request.
            assert not select.select([wire.sock], [], [], 0.2)[0]
            wire.send(data[20:])
            answers.append(served.neutral(b"".join(wire.response())).replace(mark.encode(), b""))
        assert seen(served, mark) == 1
    assert answers[0] == answers[1] == answers[2]


# --- 3. hostile apps and browsers -------------------------------------------------------


def test_an_app_slower_than_the_grace_is_answered_once(front: Session) -> None:
    warm(front, b"GET", b"/slow")
    for n in range(3):
        mark = f"slow-{n}"
        head, body = exchange(front, b"GET", f"/slow?id={mark}".encode())
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and body == b"slow", (head, body)
        assert seen(front, mark) == 1


def test_an_app_that_closes_its_idle_connections_still_answers_each_request_once(
    front: Session,
) -> None:
    for n in range(3):
        for _ in range(4):  # app connections in the pools
            warm(front, b"GET", b"/plain")
        with Wire(front) as a, Wire(front) as b:  # two app connections busy at once
            for wire in (a, b):
                wire.send(wire.request(b"GET", b"/plain"))
            for wire in (a, b):
                wire.response()
        exchange(front, b"GET", b"/drop-idle")
        mark = f"dropped-{n}"
        head, body = exchange(front, b"GET", f"/plain?id={mark}".encode())
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and body == b"hello", (head, body)
        assert seen(front, mark) == 1


def test_after_an_app_closed_the_connection_of_its_answer_the_next_request_takes_another(
    front: Session,
) -> None:
    # /bye answers and closes its connection (its end in its answer's segment): the front
    # sees the end before the next request goes out and sends that request on another
    # connection, from its own thread, not once on the closed one and again from the
    # relay.
    for _ in range(3):
        warm(front, b"GET", b"/bye")
        warm(front, b"GET", b"/plain")
    woken = []  # the event loop's wake-ups during each next request
    for n in range(5):
        mark = f"after-close-{n}"
        with Wire(front) as one, Wire(front) as two:  # two app connections in the pools
            for wire in (one, two):
                wire.send(wire.request(b"GET", b"/plain"))
            for wire in (one, two):
                wire.response()
        wait_until(holds_none(front.port()))
        with Wire(front) as wire:
            wire.send(wire.request(b"GET", b"/bye"))
            assert wire.response()[1] == b"bye"

            def next_one() -> None:
                wire.send(wire.request(b"GET", f"/plain?id={mark}".encode()))  # noqa: B023
                assert wire.response()[1] == b"hello"  # noqa: B023

            woken.append(python_wakeups(front, next_one)[0])
        assert seen(front, mark) == 1
    # The relay's retry wakes it twice or more each time; a timer of its own may once.
    assert sum(main >= 2 for main in woken) <= 1, woken


def test_an_app_that_closes_a_connection_a_request_went_out_on_gets_it_once_more(
    front: Session, plain: Session
) -> None:
    # The pools' rule: a request sent on a reused app connection that the app closes
    # without a byte goes once more, on a new one (so does the front's, by the relay).
    answers = []
    for n, served in enumerate((front, front, plain)):
        for _ in range(2):
            warm(served, b"GET", b"/plain")  # (an app connection in the pools)
        # The warm connections' app connection is in a pool once the host is done with
        # their browser side; a request sooner may find none idle and open a new one.
        wait_until(holds_none(served.port()))
        mark = f"vanish-{n}"
        answers.append(exchange(served, b"GET", f"/vanish?id={mark}".encode()))
        assert seen(served, mark) == 2
    assert answers[0] == answers[1] == answers[2]
    assert answers[0][1] == b"back"


def test_a_browser_that_leaves_before_the_response_leaks_nothing(front: Session) -> None:
    warm(front, b"GET", b"/slow")
    warm(front, b"GET", b"/plain")
    before = front.fds()
    for n in range(20):
        with Wire(front) as wire:
            target = b"/slow" if n % 2 else b"/plain"
            wire.send(wire.request(b"GET", target))
    exchange(front, b"GET", b"/slow")  # the last one left is answered meanwhile
    wait_until(lambda: front.fds() <= before + POOLED)
    head, body = exchange(front, b"GET", b"/plain")
    assert body == b"hello", head


def test_bytes_an_app_sends_after_a_response_never_reach_the_next_request(
    front: Session, plain: Session
) -> None:
    for served in (front, front, plain):
        warm(served, b"GET", b"/trailing")
        warm(served, b"GET", b"/plain")
        with Wire(served) as wire:
            wire.send(wire.request(b"GET", b"/trailing"))
            assert wire.response()[1] == b"ok"
            wire.send(wire.request(b"GET", b"/plain"))
            head, body = wire.response()
            assert body == b"hello", (head, body)
        for _ in range(4):
            assert exchange(served, b"GET", b"/plain")[1] == b"hello"


def test_a_thousand_silent_connections_leave_nothing_behind(front: Session) -> None:
    warm(front, b"GET", b"/plain")
    before = front.fds()
    socks = []
    try:
        for _ in range(FLOOD):
            socks.append(socket.create_connection(("127.0.0.1", front.port()), timeout=15))
        # The owner is still served while they are held (within the per-app limit).
        assert exchange(front, b"GET", b"/plain")[1] == b"hello"
    finally:
        for sock in socks:
            sock.close()
    wait_until(lambda: front.fds() <= before + POOLED)
    # and the front serves new connections as before, on its own
    main, _ = python_wakeups(front, lambda: many_gets(front))
    assert main < CONNECTIONS // 2, main


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """CPU time (user and system) of each thread of process ``pid``."""
    found = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/task/{task}/stat").read_text().rsplit(")", 1)[1].split()
            found[int(task)] = (int(fields[11]) + int(fields[12])) / tick
    return found


# How long the host is watched while it is out of descriptors: many of the front's pauses
# (a tenth of a second each).
STARVED_SECONDS = 1.0


def test_a_host_out_of_descriptors_waits_without_spinning_and_serves_again(
    front: Session,
) -> None:
    warm(front, b"GET", b"/plain")
    soft, hard = resource.prlimit(front.pid, resource.RLIMIT_NOFILE)
    held: list[socket.socket] = []
    try:
        resource.prlimit(front.pid, resource.RLIMIT_NOFILE, (front.fds() + 8, hard))
        for _ in range(40):  # more than the host may accept now
            held.append(socket.create_connection(("127.0.0.1", front.port()), timeout=15))
        before = thread_cpu_seconds(front.pid)
        time.sleep(STARVED_SECONDS)  # (a window to measure, not a wait for anything)
        after = thread_cpu_seconds(front.pid)
        spent = {tid: after[tid] - before.get(tid, 0.0) for tid in after}
        assert max(spent.values()) < STARVED_SECONDS / 2, spent
    finally:
        for sock in held:
            sock.close()
        resource.prlimit(front.pid, resource.RLIMIT_NOFILE, (soft, hard))

    def served_again() -> bool:
        return exchange(front, b"GET", b"/plain")[1] == b"hello"

    wait_until(served_again)
    main, _ = python_wakeups(front, lambda: many_gets(front))
    assert main < CONNECTIONS // 2, main


def test_the_per_app_limit_counts_what_the_front_holds_and_refuses_past_it(
    limited: Session,
) -> None:
    warm(limited, b"GET", b"/plain")
    held: list[Wire] = []
    try:
        for n in range(LIMIT):
            wire = Wire(limited)
            held.append(wire)
            if n % 2:  # idle after a response the front gave; the others silent from the start
                wire.send(wire.request(b"GET", b"/plain"))
                assert wire.response()[1] == b"hello"
        for _ in range(3):
            head, _ = exchange(limited, b"GET", b"/plain")
            assert head.startswith(b"HTTP/1.1 503 "), head
    finally:
        for wire in held:
            wire.sock.close()

    def served_again() -> bool:
        return exchange(limited, b"GET", b"/plain")[0].startswith(b"HTTP/1.1 200 ")

    wait_until(served_again)


def as_nobody() -> list[str]:
    """The prefix that runs a command as user nobody (these tests need root to use it)."""
    assert os.geteuid() == 0, "this test connects as user nobody and needs root"
    return AS_NOBODY


NOBODY_CLIENT = """
import socket, sys
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=15)
sock.sendall(sys.argv[2].encode("latin-1"))
data = b""
try:
    while chunk := sock.recv(65536):
        data += chunk
except ConnectionResetError:
    pass
print("GOT", len(data), data[:12])
"""


def test_another_users_connection_is_refused_and_the_owners_go_on(front: Session) -> None:
    warm(front, b"GET", b"/plain")
    with Wire(front) as owner:
        owner.send(owner.request(b"GET", b"/plain"))
        assert owner.response()[1] == b"hello"
        request = owner.request(b"GET", b"/plain?id=nobody").decode("latin-1")
        result = subprocess.run(
            [*as_nobody(), "/usr/bin/python3", "-c", NOBODY_CLIENT, str(front.port()), request],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.stdout.strip() == "GOT 0 b''", (result.stdout, result.stderr)
        owner.send(owner.request(b"GET", b"/plain"))
        assert owner.response()[1] == b"hello"
    assert seen(front, "nobody") == 0
    assert exchange(front, b"GET", b"/plain")[1] == b"hello"


NOBODY_PYTHON = ("/usr/bin/python3", "-c")
NOBODY_SEND_AND_CLOSE = """
import socket, sys
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=15)
sock.sendall(sys.argv[2].encode("latin-1"))
sock.close()
print("SENT", flush=True)
"""


@pytest.mark.parametrize("front_door", [True, False], ids=["front", "python"])
def test_another_users_request_sent_and_closed_at_once_never_reaches_the_app(
    tmp_path_factory: pytest.TempPathFactory, front_door: bool
) -> None:
    """A client socket its process has closed is reported by the kernel as an orphan,
    then in TIME_WAIT with uid 0: both checks took that for root's (the owner's, or
    let in as root), so another user's request, sent and closed at once, was served."""
    options = () if front_door else ("--no-front-door",)
    with session(tmp_path_factory, *options) as served:
        request = (
            b"POST /plain?id=closed HTTP/1.1\r\nHost: " + served.host() + b"\r\n"
            b"Content-Length: 0\r\n\r\n"
        ).decode("latin-1")
        # The host stopped, the kernel completes the connection and takes the client's
        # close: the host meets a client socket already in TIME_WAIT at its accept.
        os.kill(served.pid, signal.SIGSTOP)
        try:
            sent = subprocess.run(
                [*as_nobody(), *NOBODY_PYTHON, NOBODY_SEND_AND_CLOSE, str(served.port()), request],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert sent.stdout.strip() == "SENT", (sent.stdout, sent.stderr)
            # (the kernel's delayed ACK of the client's FIN makes it TIME_WAIT)
            wait_until(lambda: closed_clients_of(served.port()) == 1)
        finally:
            os.kill(served.pid, signal.SIGCONT)
        # The relay says so at its first refusal on the port (the request was served,
        # and nothing said, before).
        served.process.wait_line("sandbridge: connection.other_user_refused", "stderr", 30)
        assert seen(served, "closed") == 0
        assert exchange(served, b"GET", b"/plain")[1] == b"hello"


FLOOD_SCRIPT = str(REPO / "tests" / "peers" / "idle_flood.py")
# Past both the per-app limit and the front's own places (1,024 each).
NOBODY_FLOOD = 1100


def test_another_users_flood_is_closed_and_the_owner_is_served_by_the_front(
    front: Session,
) -> None:
    warm(front, b"GET", b"/plain")
    flood = Process(
        [*as_nobody(), "/usr/bin/python3", FLOOD_SCRIPT, str(front.port()), str(NOBODY_FLOOD)]
    )
    try:
        flood.wait_line(f"flooding {NOBODY_FLOOD} connected", timeout=60)
        assert flood.wait_line("refused ", timeout=60) == f"refused {NOBODY_FLOOD}"
        many_gets(front)
    finally:
        flood.stop()


# --- 4. nothing outlives the session ----------------------------------------------------


def end_a_session_holding_connections(work: Path) -> None:
    """A session of the front app, ended while the front holds a silent connection and
    an idle one it served: both end with it."""
    run = Process(run_argv(work, PYTHON, FRONT_APP))
    try:
        urls = json.loads(run.wait_line("READY ", timeout=60).removeprefix("READY "))
        served = Session(run, {**urls, "port": str(urls["port"])})
        warm(served, b"GET", b"/plain")
        with Wire(served) as silent, Wire(served) as idle:
            idle.send(idle.request(b"GET", b"/plain"))
            assert idle.response()[1] == b"hello"
            run.stop()
            assert silent.ended()
            assert idle.ended()
    finally:
        if run.popen.poll() is None:
            run.popen.kill()
            run.popen.wait()


def test_the_sessions_end_closes_every_connection_the_front_holds(
    daemon: Process, xdg: Path, tmp_path: Path
) -> None:
    # The daemon's front door outlives its sessions: what it held of them must not, and
    # what it holds of another session stays. (The daemon's first session leaves what
    # it keeps for the next ones: counted from then.)
    other = Process(run_argv(tmp_path, PYTHON, FRONT_APP))
    try:
        urls = json.loads(other.wait_line("READY ", timeout=60).removeprefix("READY "))
        staying = Session(other, {**urls, "port": str(urls["port"])})
        daemon.wait_line("sandbridge: daemon.session ", "stderr")  # (the daemon serves it)
        warm(staying, b"GET", b"/plain")
        with Wire(staying) as idle:
            idle.send(idle.request(b"GET", b"/plain"))
            assert idle.response()[1] == b"hello"
            end_a_session_holding_connections(tmp_path)

            def fds() -> int:
                return len(os.listdir(f"/proc/{daemon.popen.pid}/fd"))

            before = fds()
            end_a_session_holding_connections(tmp_path)
            wait_until(lambda: fds() <= before)
            idle.send(idle.request(b"GET", b"/plain"))
            assert idle.response()[1] == b"hello"
    finally:
        other.stop()


def late_sent(served: Session, target: str) -> bool:
    """Whether the app sent its extra bytes after its response to ``target``."""
    late = stats(served)["late"]
    assert isinstance(late, list)
    return target in late


def test_bytes_an_app_sends_on_an_idle_connection_never_answer_the_next_request(
    front: Session, plain: Session
) -> None:
    answers = []
    for n, served in enumerate((plain, front, front)):
        for _ in range(2):  # (not /late: its extra bytes would meet the next request)
            warm(served, b"GET", b"/plain")
        mark = f"late-{n}"
        with Wire(served) as wire:
            wire.send(wire.request(b"GET", f"/late?id={mark}".encode()))
            assert wire.response()[1] == b"ok", n
            # the app sent more on that connection after its response, while it was idle
            sent = f"/late?id={mark}"
            wait_until(functools.partial(late_sent, served, sent))
            wire.send(wire.request(b"GET", b"/plain"))
            head, body = wire.response()
            answers.append((served.neutral(head), body))
    assert answers[0] == answers[1] == answers[2]
    assert answers[0][1] == b"hello"


ODD_TARGETS = [
    b"/",
    b"/app",
    b"/app?x=1",
    b"/app/",
    b"/apple",
    b"//twice",
    b"/%2e%2e/plain",
    b"/app/../plain",
    b"/a;b=c,d",
    b"/~user/'quoted'(x)*!$&+=:@",
    b"/q?" + b"long" * 2000,
]


@pytest.mark.parametrize("app", ["root", "base"])
def test_every_target_reaches_the_app_as_the_python_relay_sends_it(
    front: Session, plain: Session, app: str
) -> None:
    for served in (front, plain):
        warm(served, b"GET", b"/plain", app=app)
    for target in ODD_TARGETS:
        answers = [exchange(front, b"GET", target, app=app) for _ in range(2)]
        assert answers == [exchange(plain, b"GET", target, app=app)] * 2, target


def test_a_browser_that_reads_slowly_gets_every_response_whole_and_in_order(
    front: Session, plain: Session
) -> None:
    answers = []
    for served in (front, front, plain):
        warm(served, b"GET", b"/plain")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before it connects
        wire = Wire.__new__(Wire)
        wire.served, wire.app, wire.buffer, wire.sock = served, "root", b"", sock
        sock.settimeout(15)
        sock.connect(("127.0.0.1", served.port()))
        with wire:
            for n in range(8):
                wire.send(wire.request(b"GET", b"/sized?n=%d" % n))
                # (its response has begun: the next request comes while it is unread)
                assert select.select([sock], [], [], 15)[0]
            answers.append([served.neutral(b"".join(wire.response())) for _ in range(8)])
    assert answers[0] == answers[1] == answers[2]
    assert all(answer.endswith(BIG[:60000]) for answer in answers[0])


def test_a_request_followed_by_the_browsers_half_close_is_answered(
    front: Session, plain: Session
) -> None:
    answers = []
    for served in (front, front, plain):
        warm(served, b"GET", b"/plain")
        with Wire(served) as wire:
            wire.send(wire.request(b"GET", b"/plain"))
            wire.sock.shutdown(socket.SHUT_WR)
            answers.append(served.neutral(b"".join(wire.response())))
            assert wire.ended()
    assert answers[0] == answers[1] == answers[2]


def test_connections_the_front_holds_end_after_the_keepalive_timeout(limited: Session) -> None:
    warm(limited, b"GET", b"/plain")
    with Wire(limited) as silent, Wire(limited) as idle:
        idle.send(idle.request(b"GET", b"/plain"))
        assert idle.response()[1] == b"hello"
        started = time.monotonic()
        assert silent.ended()
        assert idle.ended()
        assert time.monotonic() - started >= KEEPALIVE / 2  # not at once: at the timeout


def test_a_connection_the_front_counted_is_not_refused_when_it_hands_it_over(
    limited: Session,
) -> None:
    # At the limit, the newest connection is the one refused (as without the front
    # door): not one the front admitted, counted and sent a request for, and then
    # handed to the Python relay (here: its response is chunked) just after a newer one
    # took its place.
    warm(limited, b"GET", b"/plain")
    warm(limited, b"GET", b"/chunked")
    statuses = []
    for _ in range(20):
        wait_until(lambda: host_connections(limited.port()) == 0)  # the last round's gone
        held = [Wire(limited) for _ in range(LIMIT - 1)]
        try:
            last = Wire(limited)
            held.append(last)
            last.send(last.request(b"GET", b"/chunked"))
            held.append(Wire(limited))  # one past the limit
            statuses.append(last.head().split(b"\r\n")[0])
        finally:
            for wire in held:
                wire.sock.close()
    assert statuses == [b"HTTP/1.1 200 OK"] * 20


EXTRA_PORT = 8123  # in the sandbox, published by the session's config


def test_an_app_that_stops_listening_takes_what_the_front_holds_of_it_along(
    tmp_path: Path,
) -> None:
    # Auto-publish closes the host port of an app whose socket closed: the front door
    # closes the browser connections it held for it (the session goes on).
    work = tmp_path / "work"
    (work / ".sandbridge").mkdir(parents=True)
    (work / ".sandbridge" / "config").write_text(f"publish = {EXTRA_PORT}\n")
    xdg = Path(tempfile.mkdtemp(prefix="sbx-"))
    run = Process(
        run_argv(work, PYTHON, FRONT_APP, str(EXTRA_PORT)),
        env={**os.environ, "XDG_RUNTIME_DIR": str(xdg)},
    )
    try:
        urls = json.loads(run.wait_line("READY ", timeout=60).removeprefix("READY "))
        line = run.wait_line(f"sandbridge: sandbox port {EXTRA_PORT} ", "stderr")
        urls["root"], urls["port"] = line.rsplit(" ", 1)[1], str(EXTRA_PORT)
        served = Session(run, urls)
        warm(served, b"GET", b"/plain")
        before = served.fds()
        with Wire(served) as silent, Wire(served) as idle:
            idle.send(idle.request(b"GET", b"/plain"))
            assert idle.response()[1] == b"hello"
            assert exchange(served, b"GET", b"/stop-extra")[1] == b"stopped"
            assert silent.ended()
            assert idle.ended()
        wait_until(lambda: served.fds() < before)  # (its listener is closed too)
        assert run.popen.poll() is None
    finally:
        run.stop()
        shutil.rmtree(xdg, ignore_errors=True)


# --- 5. the session's limit, told by a listener the front does not serve ---------------


class _Taken:
    """An adopter that keeps what the front hands over."""

    def __init__(self) -> None:
        self.handoffs: list[Handoff] = []
        self.arrived = asyncio.Event()
        self.wanted = 0  # app connections the front asked for

    def adopt(self, handoff: Handoff) -> None:
        self.handoffs.append(handoff)
        self.arrived.set()

    def want_upstream(self) -> None:
        self.wanted += 1


def test_a_session_full_through_an_app_the_front_does_not_serve_leaves_it_no_room() -> None:
    """A listener the front could not take (it serves at most 1,024) is served by the event
    loop; its connections count in the session's limit, which the front must hear of:
    past it, the front holds no new connection of the session's other apps."""

    async def scenario() -> None:
        scope = SessionScope(RelaySettings(max_connections=3))
        taken = _Taken()
        door = front_door()
        listener = listening_socket(0)
        served, other = scope.budget.open(), scope.budget.open()
        lid = door.add(listener, taken, "/", scope, served)
        loop = asyncio.get_running_loop()
        clients: list[socket.socket] = []
        try:

            async def connect() -> None:
                client = socket.socket()
                client.setblocking(False)
                clients.append(client)
                await loop.sock_connect(client, listener.getsockname())

            await connect()  # held by the front, waiting for its request
            async with asyncio.timeout(10):
                while door.held(lid).held != 1:
                    await asyncio.sleep(0.01)
            assert door.held(lid).scope_held == 1
            # Two more, counted by the relay on the other app: the session is full.
            assert other.admit() and other.admit()
            assert not other.admit()  # (the third place is the one the front holds)
            scope.budget.check()
            await connect()
            async with asyncio.timeout(10):
                await taken.arrived.wait()
            [handoff] = taken.handoffs
            os.close(handoff.browser_fd)
            assert handoff.kind == FRESH and handoff.app_fd == -1 and handoff.data == b""
            assert handoff.checked and not handoff.counted
            assert door.held(lid).held == 1  # the first only: no room for the second
            scope.budget.check()
        finally:
            for client in clients:
                client.close()
            door.remove(lid)
            served.unserved()
            listener.close()

    asyncio.run(scenario())


def test_handoff_kinds_the_relay_reads_are_the_ones_the_c_writes() -> None:
    # connection_stage.py keeps them so that the relay reads handoffs without importing the C.
    kinds = (
        connection_stage.FRESH,
        connection_stage.SENT,
        connection_stage.RETRY,
        connection_stage.WANT,
    )
    assert kinds == (_front.FRESH, _front.SENT, _front.RETRY, _front.WANT)
    # (every kind but WANT hands a connection over: the stage table says how it goes on)
    assert sorted(connection_stage.C_KINDS) == sorted(kinds[:3])


def test_connection_states_the_stage_table_maps_are_the_ones_the_c_keeps() -> None:
    states = (
        connection_stage.C_FREE,
        connection_stage.C_FIRST,
        connection_stage.C_AWAIT,
        connection_stage.C_IDLE,
        connection_stage.C_WAIT,
    )
    assert states == (_front.FREE, _front.FIRST, _front.AWAIT, _front.IDLE, _front.WAIT)
    assert sorted(connection_stage.C_STATES) == sorted(states)


def test_front_door_is_built_where_the_tests_run() -> None:
    # ./dev.sh builds it with -Werror: a tree whose C does not build fails here too.
    assert front_py.missing() is None


def _c_loaded(pid: int) -> bool:
    """Whether process ``pid`` has the front door's shared object mapped."""
    return "/_front.cpython" in Path(f"/proc/{pid}/maps").read_text()


def test_no_front_door_never_loads_the_c(front: Session, plain: Session) -> None:
    # Imported on first use only: a session that turned it off runs as a machine where it
    # was never built does (tests/test_install.py runs one).
    assert _c_loaded(front.pid)
    assert not _c_loaded(plain.pid)


# --- 6. one pool size for the front's pool and the relay's together ---------------------


def test_the_pool_size_bounds_the_front_doors_pool_and_the_relays_together() -> None:
    """``--app-pool-size`` is one number for an app's two pools: an idle connection the
    host alone holds is closed, not parked in the front's pool, once the relay's pool
    and the front's hold that many between them (the front took it while its own held
    fewer, so the two held up to twice the size)."""

    async def scenario() -> None:
        scope = SessionScope(RelaySettings(pool_size=2))
        door = front_door()
        listener = listening_socket(0)
        lid = door.add(listener, _Taken(), "/", scope, scope.budget.open())
        loop = asyncio.get_running_loop()
        apps: list[socket.socket] = []

        async def idle_app_connection() -> UpstreamConnection:
            ours, app = socket.socketpair()
            apps.append(app)
            _, channel = await loop.connect_accepted_socket(lambda: Channel(READ_BYTES), ours)
            channel.host_only = True
            return UpstreamConnection(channel)

        try:
            first = await idle_app_connection()
            # The relay's pool holds one: room for one more, in the front's.
            assert door.park_upstream(lid, first, 1, scope.settings.pool_size)
            assert door.held(lid).pooled == 1
            second = await idle_app_connection()
            assert door.park_upstream(lid, second, 1, scope.settings.pool_size)
            assert door.held(lid).pooled == 1  # closed: 1 in the relay's, 1 in the front's
            transport = second.channel.transport
            assert transport is not None and transport.is_closing()
            # With the relay's pool empty, the front's takes it up to the size.
            third = await idle_app_connection()
            assert door.park_upstream(lid, third, 0, scope.settings.pool_size)
            assert door.held(lid).pooled == 2
        finally:
            for app in apps:
                app.close()
            door.remove(lid)
            listener.close()

    asyncio.run(scenario())
