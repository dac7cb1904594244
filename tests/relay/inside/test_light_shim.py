"""The light shim, as a real sandbox's entry serves it: real HTTP requests through the
relay are handed off without the event loop ever loading, bad first lines get the
event loop's shim's very refusals, and what needs the event loop (v1, a relayed stream)
loads it without dropping a connection the light shim was still serving."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import select
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbridge.aio import event_loop
from sandbridge.aio.before_loop import bind_unix_socket
from sandbridge.aio.poll_loop import PollLoop, Timer
from sandbridge.protocol import stream
from sandbridge.protocol.limits import MAX_V1_LINE_BYTES
from sandbridge.protocol.shim_opening import APP_CONNECT_TIMEOUT, FIRST_LINE_TIMEOUT
from sandbridge.relay.inside.light_shim import LightShim
from tests.conftest import (
    ECHO_APP,
    EVENT_LOOP_LIBRARIES,
    PYTHON,
    STARTS_A_SANDBOX,
    Process,
    Relay,
    echo,
    event_loop_libraries,
    host_port_of,
    is_sandbox_entry,
    memory_kib,
    module_relay,
    processes_with,
    read_to_end,
    run_argv,
)

# issue 15's bound on the shim's memory (RSS) once it has served.
SHIM_RSS_LIMIT_KIB = 16 * 1024
# Libraries the event loop brings: asyncio's C part, OpenSSL's module (asyncio imports
# ssl), uvloop.
APP_PORT = 4173


@dataclass
class Sandbox:
    process: Process
    entry: int  # the entry's pid, outside the sandbox
    url_port: int  # the app's host port
    upstream: Path

    def loaded(self) -> list[str]:
        return event_loop_libraries(self.entry)

    def rss_kib(self) -> int:
        return memory_kib(self.entry)

    def connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(FIRST_LINE_TIMEOUT + 20)
        sock.connect(str(self.upstream))
        return sock


@pytest.fixture
def sandbox(tmp_path: Path, xdg: Path) -> Iterator[Sandbox]:
    """The echo app registered on APP_PORT in a sandbox with no network."""
    marker = f"light-shim-{os.getpid()}-{tmp_path.name}"
    script = f"exec {PYTHON} {ECHO_APP} --register {APP_PORT}"
    process = Process(
        run_argv(tmp_path, "sh", "-c", script, marker, options=("--net", "none", "--no-daemon"))
    )
    try:
        report = json.loads(process.wait_line("READY").removeprefix("READY "))
        (entry,) = [pid for pid in processes_with(marker) if is_sandbox_entry(pid)]
        upstream = xdg / f"ags-webview-relay-{process.popen.pid}" / "upstream.sock"
        yield Sandbox(process, entry, host_port_of(str(report["urls"][0])), upstream)
    finally:
        process.stop()


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relay]:
    """One relay for the module: its shim answers as the light shim must."""
    with module_relay(tmp_path_factory) as relay:
        yield relay


def _exchange(sock: socket.socket, data: bytes) -> bytes:
    with sock:
        sock.sendall(data)
        return read_to_end(sock)


def relay_connection(relay: Relay) -> socket.socket:
    """A connection to the event loop's shim (``sandbridge shim``, no sandbox)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(str(relay.runtime_dir / "upstream.sock"))
    return sock


def _v1_request(path: str) -> bytes:
    message = {"type": "http_request", "port": APP_PORT, "method": "GET", "path": path}
    return json.dumps(message).encode() + b"\n"


@STARTS_A_SANDBOX
def test_real_requests_are_handed_off_without_the_event_loop_within_16_mib(
    sandbox: Sandbox,
) -> None:
    assert sandbox.loaded() == []
    for number in range(20):  # each a new browser connection: one handoff each
        assert echo(sandbox.url_port, f"/request/{number}")["path"] == f"/request/{number}"
    assert sandbox.loaded() == []
    assert sandbox.rss_kib() < SHIM_RSS_LIMIT_KIB


# First lines the light shim refuses itself: each answer must be the event loop's
# shim's, byte for byte.
HOSTILE_FIRST_LINES = [
    b"not json\n",
    b"[1]\n",
    b'{"type":"http_stream","version":1,"port":NaN,"handoff":1}\n',
    b'{"type":"http_stream","version":1,"port":1e999,"handoff":1}\n',
    b'{"type":"http_stream","version":1,"port":0,"handoff":1}\n',
    b'{"type":"http_stream","version":1,"port":"4173","handoff":1}\n',
    b'{"type":"http_stream","version":9,"port":4173,"handoff":1}\n',
    b'{"type":"http_stream","version":1,"port":4173,"handoff":1,"x":' + b"[" * 40 + b"\n",
    b"{}\n",
    b'{"type":"register","port":4173}\n',
    b"\n",
    b"",  # the host closes without a line
]


@STARTS_A_SANDBOX
def test_hostile_first_lines_get_the_event_loop_shims_refusals(
    sandbox: Sandbox, relay: Relay
) -> None:
    for line in HOSTILE_FIRST_LINES:
        with relay_connection(relay) as sock:
            sock.sendall(line)
            sock.shutdown(socket.SHUT_WR)
            expected = read_to_end(sock)
        light = sandbox.connect()
        with light:
            light.sendall(line)
            light.shutdown(socket.SHUT_WR)
            assert read_to_end(light) == expected, line
        assert expected.startswith(b'{"ok":false'), expected
    assert sandbox.loaded() == []


@STARTS_A_SANDBOX
def test_an_app_on_ipv6_loopback_only_is_handed_off_without_the_event_loop(
    tmp_path: Path, xdg: Path
) -> None:
    """Node's ``localhost`` is ``::1`` where /etc/hosts lists it first: the light shim
    connects there once 127.0.0.1 refuses (and the host's own sockets do too)."""
    marker = f"light-shim-v6-{os.getpid()}-{tmp_path.name}"
    script = f"exec {PYTHON} {ECHO_APP} --register {APP_PORT} --bind ::1 --v6only"
    process = Process(
        run_argv(tmp_path, "sh", "-c", script, marker, options=("--net", "none", "--no-daemon"))
    )
    try:
        report = json.loads(process.wait_line("READY").removeprefix("READY "))
        (entry,) = [pid for pid in processes_with(marker) if is_sandbox_entry(pid)]
        assert echo(host_port_of(str(report["urls"][0])), "/v6")["path"] == "/v6"
        upstream = xdg / f"ags-webview-relay-{process.popen.pid}" / "upstream.sock"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(30)
            sock.connect(str(upstream))
            sock.sendall(stream.encode_open(APP_PORT, handoff=True))
            line, fds, _, _ = socket.recv_fds(sock, 4096, 4)
        assert json.loads(line) == {"ok": True, "stream": 1, "handoff": 1}
        with socket.socket(fileno=fds[0]) as app:
            assert app.getpeername()[:2] == ("::1", APP_PORT)
        assert event_loop_libraries(entry) == []
    finally:
        process.stop()


@STARTS_A_SANDBOX
def test_a_handoff_to_a_closed_port_is_refused_as_the_event_loop_shim_refuses_it(
    sandbox: Sandbox, relay: Relay
) -> None:
    opening = stream.encode_open(1, handoff=True)
    with relay_connection(relay) as sock:
        expected = _exchange(sock, opening)
    assert _exchange(sandbox.connect(), opening) == expected
    assert json.loads(expected)["error"].startswith("connect to 127.0.0.1:1 failed: ")
    assert sandbox.loaded() == []


@STARTS_A_SANDBOX
def test_a_first_line_too_long_is_refused_as_the_event_loop_shim_refuses_it(
    sandbox: Sandbox, relay: Relay
) -> None:
    """Longer than an opening, the line may be a v1 request: the event loop's shim
    reads it, and refuses it at its own limit."""
    line = b"x" * (MAX_V1_LINE_BYTES + 1)
    with relay_connection(relay) as sock:
        expected = _exchange(sock, line)
    assert _exchange(sandbox.connect(), line) == expected
    assert json.loads(expected) == {
        "ok": False,
        "error": f"message longer than {MAX_V1_LINE_BYTES} bytes",
    }


@STARTS_A_SANDBOX
def test_a_silent_connection_holds_up_neither_requests_nor_the_switch_to_the_event_loop(
    sandbox: Sandbox,
) -> None:
    """The silent connection is still served after the switch: the rest of its line,
    sent then, is answered on the event loop (its first-line timer going on there is
    ``test_a_silent_connection_at_the_switch_times_out_on_the_event_loop``)."""
    late = _v1_request("/late")
    silent = sandbox.connect()
    with silent:
        silent.sendall(late[:8])  # '{"type":' and nothing more
        assert echo(sandbox.url_port, "/beside")["path"] == "/beside"
        assert sandbox.loaded() == []
        # A v1 request needs the event loop: it loads and serves it.
        answer = json.loads(_exchange(sandbox.connect(), _v1_request("/v1")))
        assert answer["ok"] is True and answer["status"] == 200
        assert sandbox.loaded() == list(EVENT_LOOP_LIBRARIES)
        silent.sendall(late[8:])
        answer = json.loads(read_to_end(silent))
    assert answer["ok"] is True and answer["status"] == 200, answer
    assert json.loads(base64.b64decode(answer["body_base64"]))["path"] == "/late"
    assert echo(sandbox.url_port, "/after")["path"] == "/after"


@STARTS_A_SANDBOX
def test_a_stream_without_handoff_is_relayed_by_the_event_loop(sandbox: Sandbox) -> None:
    with sandbox.connect() as sock:
        sock.sendall(stream.encode_open(APP_PORT))
        sock.sendall(b"GET /relayed HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = read_to_end(sock)
    ack, _, response = answer.partition(b"\n")
    assert json.loads(ack) == {"ok": True, "stream": 1}
    assert response.startswith(b"HTTP/1.1 200 ")
    assert b'"/relayed"' in response
    assert sandbox.loaded() == list(EVENT_LOOP_LIBRARIES)


@STARTS_A_SANDBOX
def test_connections_the_light_shim_passed_on_together_are_all_served(
    sandbox: Sandbox,
) -> None:
    """Several v1 requests waiting while the event loop loads: none is lost."""
    socks = [sandbox.connect() for _ in range(5)]
    for number, sock in enumerate(socks):
        sock.sendall(_v1_request(f"/waiting/{number}"))
    for number, sock in enumerate(socks):
        with sock:
            answer = json.loads(read_to_end(sock))
        assert answer["status"] == 200, answer
        body = json.loads(base64.b64decode(answer["body_base64"]))
        assert body["path"] == f"/waiting/{number}"


# --- the light shim in this process, on its poll loop in a thread -------------------


class LightServer:
    """A LightShim on a PollLoop run by a thread, on a private listener."""

    def __init__(self, path: Path, app_connect_timeout: float = APP_CONNECT_TIMEOUT) -> None:
        self.path = path
        self.loop = PollLoop()
        self.needed = threading.Event()
        self.shim = LightShim(
            bind_unix_socket(path),
            self.loop,
            needs_loop=self._needs_loop,
            app_connect_timeout=app_connect_timeout,
        )
        self._wake, self._waker = socket.socketpair()
        self.loop.add_reader(self._wake.fileno(), self.loop.stop)
        self.shim.start()
        self._thread = threading.Thread(target=self.loop.run)
        self._thread.start()

    def _needs_loop(self) -> None:
        self.needed.set()

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self._waker.send(b"x")
        self._thread.join(30)
        self.loop.remove_reader(self._wake.fileno())
        self._wake.close()
        self._waker.close()

    def connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(30)
        sock.connect(str(self.path))
        return sock


@pytest.fixture
def light(tmp_path: Path) -> Iterator[LightServer]:
    server = LightServer(tmp_path / "upstream.sock")
    yield server
    server.stop()
    server.shim.close()


@pytest.fixture
def full_port() -> Iterator[int]:
    """A loopback port whose accept queue is full: a connect to it stays in progress
    (the kernel drops its SYN) until it is given up."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued = []
    while True:
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        client.setblocking(False)
        queued.append(client)
        if client.connect_ex(("127.0.0.1", port)) != 0:
            break  # this one waits: the queue is full
    yield port
    for client in queued:
        client.close()
    listener.close()


def test_a_slow_app_connect_holds_up_no_other_connection(
    light: LightServer, full_port: int, app_port: int
) -> None:
    with light.connect() as slow:
        slow.sendall(stream.encode_open(full_port, handoff=True))
        with light.connect() as quick:
            quick.sendall(stream.encode_open(app_port, handoff=True))
            line, fds, _, _ = socket.recv_fds(quick, 4096, 4)
        assert json.loads(line) == {"ok": True, "stream": 1, "handoff": 1}
        with socket.socket(fileno=fds[0]) as app:
            assert app.getpeername() == ("127.0.0.1", app_port)
        assert select.select([slow], [], [], 0)[0] == []  # still connecting
    # the slow connect's end: test_an_app_connect_that_never_completes_times_out


class TimerStoppedLoop(PollLoop):
    """A poll loop the test runs in its own thread: :meth:`run` returns as soon as a
    timer is set (the light shim sets one when it accepts a connection, and another when
    a connect to the app is in progress), so the test knows where the shim is with no
    race against the timer's end."""

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer:
        timer = super().call_later(delay, callback)
        self.stop()
        return timer


# Short timeouts for the tests that wait for one to end (the shim's own are seconds).
SHORT_TIMEOUT = 0.2


@pytest.fixture
def stepped(tmp_path: Path) -> Iterator[tuple[LightShim, TimerStoppedLoop, Path]]:
    """A light shim with short timeouts on a :class:`TimerStoppedLoop`."""
    path = tmp_path / "upstream.sock"
    loop = TimerStoppedLoop()
    listener = bind_unix_socket(path)
    shim = LightShim(
        listener,
        loop,
        needs_loop=loop.stop,
        first_line_timeout=SHORT_TIMEOUT,
        app_connect_timeout=SHORT_TIMEOUT,
    )
    shim.start()
    yield shim, loop, path
    shim.close()
    listener.close()


def _connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(str(path))
    return sock


def test_an_app_connect_that_never_completes_times_out(tmp_path: Path, full_port: int) -> None:
    light = LightServer(tmp_path / "upstream.sock", app_connect_timeout=SHORT_TIMEOUT)
    try:
        with light.connect() as sock:
            sock.sendall(stream.encode_open(full_port, handoff=True))
            answer = json.loads(read_to_end(sock))
        assert answer == {
            "ok": False,
            "stream": 1,
            "error": f"connect to 127.0.0.1:{full_port} failed: timed out",
        }
        assert light.shim.serving == 0
    finally:
        light.stop()
        light.shim.close()


def test_what_needs_the_event_loop_is_passed_on_with_the_bytes_read(
    light: LightServer,
) -> None:
    request = _v1_request("/v1")
    with light.connect() as sock:
        sock.sendall(request)
        assert light.needed.wait(30)
        light.stop()  # the entry stops the poll loop when the event loop is needed
        adopted: list[tuple[bytes, float]] = []

        def adopt(passed: socket.socket, received: bytes, left: float) -> None:
            adopted.append((received, left))
            passed.close()

        async def switch() -> None:
            light.shim.continue_on(asyncio.get_running_loop(), adopt)

        event_loop.run(switch())
    ((received, left),) = adopted
    assert received == request
    assert 0 < left <= FIRST_LINE_TIMEOUT


def _connecting_to(port: int) -> int:
    """Sockets of this machine's loopback in SYN_SENT toward ``port``."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "02" and int(fields[2].split(":")[1], 16) == port:
            count += 1
    return count


def _never_adopted(passed: socket.socket, received: bytes, left: float) -> None:
    raise AssertionError(f"passed on: {received!r}")


def _switch_and_read(shim: LightShim, sock: socket.socket) -> bytes:
    """Go on serving on an event loop, and read ``sock``'s answer there."""

    async def switch() -> bytes:
        shim.continue_on(asyncio.get_running_loop(), _never_adopted)
        return await asyncio.to_thread(read_to_end, sock)

    return event_loop.run(switch())


def test_an_app_connect_in_progress_at_the_switch_ends_on_the_event_loop(
    stepped: tuple[LightShim, TimerStoppedLoop, Path], full_port: int
) -> None:
    shim, loop, path = stepped
    with _connect(path) as sock:
        before = _connecting_to(full_port)
        sock.sendall(stream.encode_open(full_port, handoff=True))
        loop.run()  # accepted
        loop.run()  # connecting: its writer and timer move with the switch
        assert _connecting_to(full_port) == before + 1
        assert select.select([sock], [], [], 0)[0] == []
        answer = _switch_and_read(shim, sock)
    assert json.loads(answer)["error"] == f"connect to 127.0.0.1:{full_port} failed: timed out"
    assert shim.serving == 0


def test_a_silent_connection_at_the_switch_times_out_on_the_event_loop(
    stepped: tuple[LightShim, TimerStoppedLoop, Path],
) -> None:
    shim, loop, path = stepped
    with _connect(path) as sock:
        loop.run()  # accepted: its first-line timer runs
        sock.sendall(b'{"type":')  # and nothing more
        assert select.select([sock], [], [], 0)[0] == []
        answer = _switch_and_read(shim, sock)
    assert json.loads(answer) == {"ok": False, "error": "timed out"}
    assert shim.serving == 0
