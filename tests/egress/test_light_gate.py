"""The light gate, as a real ``allow``-mode sandbox's entry serves it: a sandboxed client
reaches the internet through the egress proxy (HTTP, CONNECT, a 50 MiB download) with
the event loop never loaded and the entry under 16 MiB, refusals are today's, a silent
connection holds up nothing, and the switch to the event loop keeps open connections;
then the bridge itself, on a poll loop in this process against a host played by the
test: the opening, the answer's rules, backpressure and half-close."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sandbridge.aio import event_loop
from sandbridge.aio.before_loop import bind_unix_socket
from sandbridge.aio.poll_loop import PollLoop
from sandbridge.egress.light_gate import LightGate
from sandbridge.protocol import egress_opening as egress
from tests.conftest import (
    EVENT_LOOP_LIBRARIES,
    PYTHON,
    REPO,
    SANDBRIDGE,
    Process,
    event_loop_libraries,
    is_sandbox_entry,
    memory_kib,
    processes_with,
    read_to_end,
)
from tests.egress.test_in_sandbox import NET_WORLD

GATE_CLIENT = str(REPO / "tests" / "apps" / "gate_client.py")
# issue 15's bound on the entry's memory (RSS), here also its peak (VmHWM).
ENTRY_RSS_LIMIT_KIB = 16 * 1024
# Libraries the event loop brings: asyncio's C part, OpenSSL's module, uvloop.
DOWNLOAD_BYTES = 50 * 1024 * 1024
# Connections that send nothing, left open while others are served.
SILENT_CONNECTIONS = 20


@dataclass
class World:
    """One ``--net allow`` session in the test-made internet, driven step by step."""

    process: Process
    commands: int  # the FIFO's write end
    entry: int = 0
    upstream: Path = Path()
    seen: dict[str, object] = field(default_factory=dict)

    def ask(self, command: str, timeout: float = 90) -> str:
        os.write(self.commands, command.encode() + b"\n")
        name = command.split(maxsplit=1)[0]
        line = self.process.wait_line(f"DONE {name} ", timeout=timeout)
        self.process.lines["stdout"].remove(line)  # a later ask waits for its own
        return line.removeprefix(f"DONE {name} ")

    def loaded(self) -> list[str]:
        return event_loop_libraries(self.entry)

    def memory_kib(self, field_name: str) -> int:
        return memory_kib(self.entry, field_name)

    def need_the_event_loop(self) -> dict[str, object]:
        """A v1 request on upstream.sock: what the light shim passes to the event loop."""
        message = {"type": "http_request", "port": 4173, "method": "GET", "path": "/"}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(60)
            sock.connect(str(self.upstream))
            sock.sendall(json.dumps(message).encode() + b"\n")
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        result: dict[str, object] = json.loads(answer)
        return result


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """The session run through every step; each test checks what one step saw."""
    assert os.getuid() == 0, "these tests make network namespaces (unshare --net): run as root"
    tmp_path = tmp_path_factory.mktemp("light-gate")
    work = tmp_path / "work"
    (work / ".sandbridge").mkdir(parents=True)
    (work / ".sandbridge" / "allow").write_text("public.test\npkgs.test\n")
    (work / ".sandbridge" / "config").write_text("resolver = 127.0.0.1:5353\n")
    files = tmp_path / "files"
    files.mkdir()
    payload = os.urandom(DOWNLOAD_BYTES)
    (files / "big.bin").write_bytes(payload)
    fifo = work / "commands"
    os.mkfifo(fifo)
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    marker = f"light-gate-{os.getpid()}"
    argv = [
        *SANDBRIDGE,
        "run",
        "--workdir",
        str(work),
        "--ro-bind",
        str(REPO),
        "--no-daemon",
        "--",
        PYTHON,
        GATE_CLIENT,
        "commands",
        marker,
    ]
    env = {**os.environ, "XDG_RUNTIME_DIR": str(xdg), "NET_WORLD_FILES": str(files)}
    process = Process(["unshare", "--net", "--", PYTHON, NET_WORLD, "--", *argv], env=env)
    commands = -1
    try:
        process.wait_line("READY", timeout=60)
        commands = os.open(fifo, os.O_WRONLY)
        (entry,) = [pid for pid in processes_with(marker) if is_sandbox_entry(pid)]
        (upstream,) = xdg.glob("ags-webview-relay-*/upstream.sock")
        session = World(process, commands, entry, upstream)
        _run_steps(session, hashlib.sha256(payload).hexdigest())
        yield session
    finally:
        if commands >= 0:
            os.write(commands, b"quit\n")
            os.close(commands)
        try:
            process.popen.wait(30)
        finally:
            if process.popen.poll() is None:
                process.stop()


def _run_steps(world: World, sha256: str) -> None:
    seen = world.seen
    seen["loaded_at_start"] = world.loaded()
    seen["http"] = world.ask("http http://public.test/")
    seen["connect"] = world.ask("connect http://public.test:443/")
    seen["download"] = world.ask("download http://pkgs.test/big.bin")
    seen["expected_download"] = f"size={DOWNLOAD_BYTES} sha256={sha256}"
    seen["loaded_after_download"] = world.loaded()
    seen["rss_after_download"] = world.memory_kib("VmRSS")
    seen["peak_after_download"] = world.memory_kib("VmHWM")
    seen["refused"] = world.ask("http http://other.test/")
    seen["silent"] = world.ask(f"silent {SILENT_CONNECTIONS}")
    seen["http_beside_silent"] = world.ask("http http://public.test/beside")
    seen["tunnel_open"] = world.ask("tunnel_open")
    seen["loaded_before_switch"] = world.loaded()
    seen["rss_before_switch"] = world.memory_kib("VmRSS")
    seen["switch_answer"] = world.need_the_event_loop()
    seen["loaded_after_switch"] = world.loaded()
    seen["tunnel_after_switch"] = world.ask("tunnel_use")
    seen["http_after_switch"] = world.ask("http http://public.test/after")


def test_a_sandboxed_client_fetches_through_the_proxy_by_http_and_connect(
    world: World,
) -> None:
    assert str(world.seen["http"]).startswith("status=200")
    assert "hello from public80" in str(world.seen["http"])
    assert str(world.seen["connect"]).startswith("status=200")
    assert "hello from public443" in str(world.seen["connect"])


def test_a_large_download_arrives_intact(world: World) -> None:
    assert world.seen["download"] == world.seen["expected_download"]


def test_the_entry_never_loads_the_event_loop_for_gate_traffic(world: World) -> None:
    assert world.seen["loaded_at_start"] == []
    assert world.seen["loaded_after_download"] == []
    assert world.seen["loaded_before_switch"] == []


def test_the_entry_stays_under_16_mib_through_a_large_download(world: World) -> None:
    assert isinstance(world.seen["peak_after_download"], int)
    assert world.seen["peak_after_download"] < ENTRY_RSS_LIMIT_KIB
    assert isinstance(world.seen["rss_before_switch"], int)
    assert world.seen["rss_before_switch"] < ENTRY_RSS_LIMIT_KIB


def test_a_refused_destination_is_refused_as_today(world: World) -> None:
    refused = str(world.seen["refused"])
    assert refused.startswith("status=403")
    assert "egress to other.test:80 refused" in refused
    assert not any("HIT other80" in line for line in world.process.lines["stderr"])


def test_silent_gate_connections_hold_up_nothing(world: World) -> None:
    assert world.seen["silent"] == f"open={SILENT_CONNECTIONS}"
    assert "hello from public80" in str(world.seen["http_beside_silent"])


def test_the_switch_to_the_event_loop_keeps_open_gate_connections(world: World) -> None:
    assert world.seen["tunnel_open"] == "HTTP/1.1 200 Connection established"
    assert world.seen["switch_answer"]["ok"] is False  # type: ignore[index]
    assert world.seen["loaded_after_switch"] == list(EVENT_LOOP_LIBRARIES)
    assert world.seen["tunnel_after_switch"] == repr("hello from public443\n")
    assert "hello from public80" in str(world.seen["http_after_switch"])


# --- the bridge in this process, on a poll loop in a thread, the host played here -----

HostPart = Callable[[socket.socket], None]


class GateServer:
    """A LightGate on a PollLoop run by a thread: one gate port on 127.0.0.1, bridged to
    a host the test plays (``host_part`` serves each connection to egress.sock)."""

    def __init__(self, tmp_path: Path, host_part: HostPart) -> None:
        self.egress_socket = tmp_path / "egress.sock"
        self.host_listener = bind_unix_socket(self.egress_socket)
        self.host_listener.setblocking(True)
        self.openings: list[bytes] = []
        self._host_part = host_part
        self._host_thread = threading.Thread(target=self._host, daemon=True)
        self._host_thread.start()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(100)
        listener.setblocking(False)
        self.port = listener.getsockname()[1]
        self.loop = PollLoop()
        self.gate = LightGate(self.loop, {self.port: listener}, str(self.egress_socket))
        self._wake, self._waker = socket.socketpair()
        self.loop.add_reader(self._wake.fileno(), self.loop.stop)
        self.gate.start()
        self._thread = threading.Thread(target=self.loop.run)
        self._thread.start()

    def _host(self) -> None:
        while True:
            try:
                conn, _ = self.host_listener.accept()
            except OSError:  # closed: the test is over
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(30)
            opening = b""
            while not opening.endswith(b"\n") and (chunk := conn.recv(1)):
                opening += chunk
            self.openings.append(opening)
            self._host_part(conn)

    def stop(self) -> None:
        """Stop the poll loop's thread (the entry stops it when the event loop is needed)."""
        if not self._thread.is_alive():
            return
        self._waker.send(b"x")
        self._thread.join(30)
        self.loop.remove_reader(self._wake.fileno())

    def close(self) -> None:
        self.stop()
        self.gate.close()
        self.host_listener.shutdown(socket.SHUT_RDWR)
        self.host_listener.close()
        self._wake.close()
        self._waker.close()

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        return sock


@pytest.fixture
def gate_with(tmp_path: Path) -> Iterator[Callable[[HostPart], GateServer]]:
    servers: list[GateServer] = []

    def start(host_part: HostPart) -> GateServer:
        servers.append(GateServer(tmp_path, host_part))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _exactly(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes, or fewer if the peer ends first (MSG_WAITALL does not wait on a
    socket with a timeout: Python makes it non-blocking)."""
    data = b""
    while len(data) < size and (chunk := sock.recv(size - len(data))):
        data += chunk
    return data


def _echo(conn: socket.socket) -> None:
    """The host accepts and echoes until the sandbox's side ends, then ends its own."""
    conn.sendall(egress.encode_answer())
    while chunk := conn.recv(65536):
        conn.sendall(chunk)


def test_the_opening_names_the_gate_port_and_bytes_flow_both_ways(
    gate_with: Callable[[HostPart], GateServer],
) -> None:
    gate = gate_with(_echo)
    with gate.connect() as client:
        client.sendall(b"ping")
        assert client.recv(4) == b"ping"
    assert gate.openings == [egress.encode_open(gate.port)]


def test_bytes_the_host_sent_with_its_answer_reach_the_client_first(
    gate_with: Callable[[HostPart], GateServer],
) -> None:
    def greet(conn: socket.socket) -> None:
        conn.sendall(egress.encode_answer() + b"hello ")
        conn.sendall(b"world")

    with gate_with(greet).connect() as client:
        assert read_to_end(client) == b"hello world"


@pytest.mark.parametrize(
    "answer",
    [
        egress.encode_answer("port 5433 of the gate address is not a host service"),
        b"not json\n",
        b"{" * 300,  # longer than an answer may be, without a newline
        b"",  # the host closed without answering
    ],
    ids=["refused", "not-json", "too-long", "closed"],
)
def test_no_accepted_answer_ends_the_connection_with_nothing_bridged(
    gate_with: Callable[[HostPart], GateServer], answer: bytes
) -> None:
    def refuse(conn: socket.socket) -> None:
        conn.sendall(answer + b"secret from the destination")

    gate = gate_with(refuse)
    with gate.connect() as client:
        assert read_to_end(client) == b""
    assert gate.gate.serving == 0


def test_a_host_that_never_answers_is_given_up_after_the_answer_timeout(
    gate_with: Callable[[HostPart], GateServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(egress, "ANSWER_TIMEOUT", 0.5)
    answered = threading.Event()

    def silent_host(conn: socket.socket) -> None:
        answered.wait(30)

    gate = gate_with(silent_host)
    try:
        with gate.connect() as client:
            assert read_to_end(client) == b""
    finally:
        answered.set()


def test_a_half_close_is_passed_on_both_ways(
    gate_with: Callable[[HostPart], GateServer],
) -> None:
    def reply_after_end(conn: socket.socket) -> None:
        conn.sendall(egress.encode_answer())
        request = read_to_end(conn)  # the client's half-close reached the host
        conn.sendall(b"got " + request)
        conn.shutdown(socket.SHUT_WR)

    with gate_with(reply_after_end).connect() as client:
        client.sendall(b"request")
        client.shutdown(socket.SHUT_WR)
        assert read_to_end(client) == b"got request"


def test_a_huge_write_nobody_reads_is_held_back_and_holds_up_no_other_connection(
    gate_with: Callable[[HostPart], GateServer],
) -> None:
    stop_stalling = threading.Event()

    def stall_or_echo(conn: socket.socket) -> None:
        conn.sendall(egress.encode_answer())
        first = conn.recv(1)
        if first == b"s":  # the stalled one: never reads again
            stop_stalling.wait(60)
            return
        # The gate ends this side when the test's connection goes, maybe mid-echo: what
        # the test checks is what its client read.
        with contextlib.suppress(OSError):
            conn.sendall(first)
            while chunk := conn.recv(65536):
                conn.sendall(chunk)

    gate = gate_with(stall_or_echo)
    with gate.connect() as stalled:
        stalled.setblocking(False)
        written = 0
        try:
            while written < 1024 * 1024 * 1024:
                written += stalled.send(b"s" * 1024 * 1024)
        except BlockingIOError:
            pass
        # What the kernel buffers on both sides of the gate, and one chunk held by it.
        assert written < 64 * 1024 * 1024
        with gate.connect() as other:
            other.sendall(b"e" * 1000)
            assert _exactly(other, 1000) == b"e" * 1000
        stop_stalling.set()


def test_bridged_connections_go_on_on_the_event_loop(
    gate_with: Callable[[HostPart], GateServer],
) -> None:
    gate = gate_with(_echo)
    with gate.connect() as client:
        client.sendall(b"before")
        assert _exactly(client, 6) == b"before"
        gate.stop()  # the entry stops the poll loop when the event loop is needed

        async def on_the_event_loop() -> bytes:
            gate.loop.move_to(asyncio.get_running_loop())
            client.sendall(b"after")
            return await asyncio.to_thread(_exactly, client, 5)

        assert event_loop.run(on_the_event_loop()) == b"after"


def test_a_flood_of_connections_is_served_in_full(
    gate_with: Callable[[HostPart], GateServer],
) -> None:
    """More connections at once than one accept burst takes: each is bridged."""
    gate = gate_with(_echo)
    clients = [gate.connect() for _ in range(150)]
    try:
        for number, client in enumerate(clients):
            client.sendall(b"%03d" % number)
        for number, client in enumerate(clients):
            assert _exactly(client, 3) == b"%03d" % number
    finally:
        for client in clients:
            client.close()
