"""``sandbridge connect --via`` against a far session a test started in its own
XDG_RUNTIME_DIR: the far apps as local origins, their data path, and the link dropping."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import io
import json
import os
import select
import shlex
import signal
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from sandbridge.exceptions import RemoteLinkError
from sandbridge.places.remotes import RemoteEntry, list_remotes
from sandbridge.protocol.http.private_access import TOKEN_PARAM
from sandbridge.protocol.remote_wire import FarApp
from sandbridge.remote.connect import APP_LINES_PER_MINUTE, Machine
from sandbridge.remote.transport import Link
from tests.conftest import (
    ECHO_APP,
    PYTHON,
    REPO,
    SANDBRIDGE,
    Process,
    Relay,
    app_host,
    free_port,
    host_field,
    host_port_of,
    processes_with,
    request,
    start_daemon,
)
from tests.support import command_in_process

FEATURE_APP = str(REPO / "tests" / "apps" / "feature_app.py")


@dataclass
class Far:
    """A far machine: a session (``sandbridge host`` and its shim) and two apps in it."""

    xdg: Path
    relay: Relay
    echo_port: int
    feature_port: int
    echo_url: str  # the far machine's own URL of the echo app (with its token if private)

    @property
    def session(self) -> str:
        """The far session's id (``sandbridge host`` names it at random)."""
        [path] = (self.xdg / f"sandbridge-{os.getuid()}" / "sessions").iterdir()
        return path.name

    @property
    def serve_stdio(self) -> str:
        """The --via command that reaches this far machine's serve-stdio."""
        return shlex.join(
            ["env", f"XDG_RUNTIME_DIR={self.xdg}", PYTHON, "-m", "sandbridge.cli", "serve-stdio"]
        )


@pytest.fixture
def far(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Far]:
    with far_machine(tmp_path, monkeypatch, daemon=False) as machine:
        yield machine


@contextlib.contextmanager
def far_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, daemon: bool, private: bool = False
) -> Iterator[Far]:
    """A far session in its own XDG_RUNTIME_DIR, served standalone or by the far user's
    daemon (started here); ``private``: a ``--private`` session (standalone only)."""
    xdg = tmp_path / "far-xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    runtime = tmp_path / "far-rt"
    runtime.mkdir(mode=0o700)
    far_daemon = start_daemon() if daemon else None
    relay = Relay(runtime, host_args=("--private",) if private else ())
    if far_daemon is not None:  # the session's host half is the daemon's
        far_daemon.wait_line("sandbridge: daemon.session ", "stderr")
    echo_port, feature_port = free_port(), free_port()
    echo = Process([PYTHON, ECHO_APP, "--listen", str(echo_port)])
    echo.wait_line("READY")
    echo_url = relay.register(echo_port)
    env = {**relay.env, "PATH": f"{Path(PYTHON).parent}:{os.environ['PATH']}"}
    feature = Process([PYTHON, FEATURE_APP, "--port", str(feature_port)], env=env)
    feature.wait_line("READY")
    try:
        yield Far(xdg, relay, echo_port, feature_port, echo_url)
    finally:
        feature.stop()
        echo.stop()
        relay.stop()
        if far_daemon is not None:
            far_daemon.stop()


class Laptop:
    """``sandbridge connect --via`` in the laptop's own XDG_RUNTIME_DIR."""

    def __init__(self, xdg: Path, via: str, *options: str, prefix: tuple[str, ...] = ()) -> None:
        self.xdg = xdg
        self.env = {**os.environ, "XDG_RUNTIME_DIR": str(xdg)}
        self.process = Process(
            [*prefix, *SANDBRIDGE, "connect", "--via", via, "--name", "far", *options],
            env=self.env,
        )

    def app_url(self, far: Far, far_port: int) -> str:
        """The local URL of the far app on ``far_port``, once connect announces it."""
        line = self.process.wait_line(
            f"sandbridge: far: {far.session} port {far_port} -> ", "stderr"
        )
        return line.rsplit(" ", 1)[1]

    def wait_after(self, first: str, then: str) -> None:
        """Wait for a line starting ``first``, then for a later one starting ``then``."""
        line = self.process.wait_line(first, "stderr")
        seen = self.process.lines["stderr"]
        self.process.lines["stderr"] = seen[seen.index(line) + 1 :]
        self.process.wait_line(then, "stderr")

    def wait_containing(self, text: str, timeout: float = 30.0) -> str:
        """The first line connect says (``sandbridge: far: ...``) that contains ``text``."""
        deadline = time.monotonic() + timeout
        pipe = self.process.popen.stderr
        assert pipe is not None
        while True:
            for line in self.process.lines["stderr"]:
                if line.startswith("sandbridge: far: ") and text in line:
                    return line
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no line with {text!r}: {self.process.lines['stderr']!r}"
            if select.select([pipe], [], [], remaining)[0]:
                data = os.read(pipe.fileno(), 65536)
                assert data, f"connect ended: {self.process.lines['stderr']!r}"
                # Whole lines only, as Process.wait_line keeps them (the rest waits).
                buffers = self.process._buffers
                *complete, buffers["stderr"] = (buffers["stderr"] + data).split(b"\n")
                self.process.lines["stderr"] += [raw.decode(errors="replace") for raw in complete]

    def ls(self, *options: str) -> str:
        """``sandbridge ls`` as the laptop's user, in this process
        (tests/support/command_in_process.py): what it lists."""
        listed = command_in_process.sandbridge("ls", *options, env=self.env)
        assert listed.returncode == 0, listed.stderr
        return listed.stdout

    def stop(self) -> int:
        return self.process.stop()


@pytest.fixture
def laptop_xdg(tmp_path: Path) -> Path:
    path = tmp_path / "laptop-xdg"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def laptop(far: Far, laptop_xdg: Path, localhost_names_resolve: None) -> Iterator[Laptop]:
    running = Laptop(laptop_xdg, far.serve_stdio)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def read_far(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Far]:
    """One far machine for the module's tests that only read from it: they register,
    stop and cut nothing of it (a link they cut is their laptop's, to its serve-stdio),
    so a fresh one each (seven processes) checks nothing more."""
    monkeypatch = pytest.MonkeyPatch()
    with far_machine(tmp_path_factory.mktemp("far"), monkeypatch, daemon=False) as machine:
        monkeypatch.undo()  # its XDG_RUNTIME_DIR was for its start: serve_stdio names it
        yield machine


@pytest.fixture(scope="module")
def read_laptop(read_far: Far, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Laptop]:
    """The laptop connected to :func:`read_far`, for the same tests."""
    xdg = tmp_path_factory.mktemp("laptop") / "xdg"
    xdg.mkdir(mode=0o700)
    running = Laptop(xdg, read_far.serve_stdio)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def own_laptop(read_far: Far, laptop_xdg: Path, localhost_names_resolve: None) -> Iterator[Laptop]:
    """A laptop of the test's own connected to :func:`read_far`, for the tests that load,
    stall or cut its link (their own serve-stdio), or end it."""
    running = Laptop(laptop_xdg, read_far.serve_stdio)
    try:
        yield running
    finally:
        running.stop()


def test_far_app_answers_a_get_on_its_own_local_origin(read_far: Far, read_laptop: Laptop) -> None:
    far, laptop = read_far, read_laptop
    url = laptop.app_url(far, far.echo_port)
    port = host_port_of(url)
    status, _, body = request(port, path="/hello?x=1")
    assert status == 200
    report = json.loads(body)
    assert report["path"] == "/hello?x=1"
    assert app_host(port).endswith(".localhost")  # its own site, as a local app's


def test_a_session_the_far_daemon_serves_is_reached_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, laptop_xdg: Path, localhost_names_resolve: None
) -> None:
    with far_machine(tmp_path, monkeypatch, daemon=True) as machine:
        laptop = Laptop(laptop_xdg, machine.serve_stdio)
        try:
            port = host_port_of(laptop.app_url(machine, machine.echo_port))
            assert json.loads(request(port, path="/via-daemon")[2])["path"] == "/via-daemon"
            ws_port = host_port_of(laptop.app_url(machine, machine.feature_port))

            async def check() -> None:
                async with ws_connect(f"ws://{app_host(ws_port)}:{ws_port}/ws") as ws:
                    await ws.send("through the daemon")
                    assert await ws.recv() == "through the daemon"

            asyncio.run(check())
        finally:
            laptop.stop()


def test_each_far_app_gets_its_own_origin(read_far: Far, read_laptop: Laptop) -> None:
    far, laptop = read_far, read_laptop
    echo = host_port_of(laptop.app_url(far, far.echo_port))
    feature = host_port_of(laptop.app_url(far, far.feature_port))
    assert echo != feature
    assert app_host(echo) != app_host(feature)


def test_far_apps_added_and_gone_follow_on_the_laptop(far: Far, laptop: Laptop) -> None:
    laptop.app_url(far, far.echo_port)
    other = free_port()
    app = Process([PYTHON, ECHO_APP, "--listen", str(other)])
    try:
        app.wait_line("READY")
        far.relay.register(other, "/later")
        port = host_port_of(laptop.app_url(far, other))
        assert json.loads(request(port, path="/x")[2])["path"] == "/later/x"
        session = far.session
        far.relay.stop()  # the far session ends: its apps are gone
        laptop.process.wait_line(f"sandbridge: far: {session} port {other} is gone", "stderr")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        app.stop()


def test_wrong_host_is_refused_as_for_a_local_app(read_far: Far, read_laptop: Laptop) -> None:
    far, laptop = read_far, read_laptop
    port = host_port_of(laptop.app_url(far, far.echo_port))
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/", headers={"Host": "evil.example"})
    assert conn.getresponse().status in (403, 421)
    conn.close()


def test_cross_site_websocket_is_refused(read_far: Far, read_laptop: Laptop) -> None:
    far, laptop = read_far, read_laptop
    port = host_port_of(laptop.app_url(far, far.feature_port))

    async def check() -> None:
        with pytest.raises(Exception, match="403"):
            async with ws_connect(
                f"ws://{app_host(port)}:{port}/ws",
                origin="http://evil.example",  # type: ignore[arg-type]
            ):
                pass

    asyncio.run(check())


def test_websocket_echoes_through_the_link(read_far: Far, read_laptop: Laptop) -> None:
    far, laptop = read_far, read_laptop
    port = host_port_of(laptop.app_url(far, far.feature_port))

    async def check() -> None:
        async with ws_connect(f"ws://{app_host(port)}:{port}/ws") as ws:
            await ws.send("hello")
            assert await ws.recv() == "hello"
            await ws.send(b"\x00" * 200_000)
            assert await ws.recv() == b"\x00" * 200_000

    asyncio.run(check())


def test_sse_events_arrive_as_sent(read_far: Far, read_laptop: Laptop) -> None:
    far, laptop = read_far, read_laptop
    port = host_port_of(laptop.app_url(far, far.feature_port))
    conn = http.client.HTTPConnection(app_host(port), port, timeout=10)
    conn.request("GET", "/sse?count=2&interval_ms=50&hold=1")
    response = conn.getresponse()
    assert response.status == 200
    assert response.getheader("content-type", "").startswith("text/event-stream")
    lines = [response.readline() for _ in range(8)]
    # Both events arrive while the app holds the response open: nothing is buffered.
    assert b"id: 1\n" in lines and b"id: 2\n" in lines
    conn.close()


def test_ls_lists_far_apps_with_their_machine(read_far: Far, read_laptop: Laptop) -> None:
    far, laptop = read_far, read_laptop
    url = laptop.app_url(far, far.echo_port)
    laptop.app_url(far, far.feature_port)
    text = laptop.ls()
    assert "far  (connected" in text
    assert f"port {far.echo_port} -> {url}" in text
    listed = json.loads(laptop.ls("--json"))
    remote = [entry for entry in listed if entry["machine"] == "far"]
    assert remote and remote[0]["connected"] is True
    assert url in [app["url"] for entry in remote for app in entry["apps"]]


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_100_mib_download_streams_with_bounded_memory(read_far: Far, own_laptop: Laptop) -> None:
    far, laptop = read_far, own_laptop
    port = host_port_of(laptop.app_url(far, far.echo_port))
    size = 100 * 1024 * 1024
    conn = http.client.HTTPConnection(app_host(port), port, timeout=60)
    conn.request("GET", f"/bytes?n={size}")
    response = conn.getresponse()
    assert response.status == 200
    received = 0
    while chunk := response.read(1024 * 1024):
        received += len(chunk)
    conn.close()
    assert received == size
    connect_pid = laptop.process.popen.pid
    assert _rss_kib(connect_pid) < 64 * 1024, "connect held the body in memory"
    serve = _serve_stdio_pids(laptop)
    assert serve and all(_rss_kib(p) < 64 * 1024 for p in serve)


def test_a_stalled_download_does_not_starve_another_connection(
    read_far: Far, own_laptop: Laptop
) -> None:
    far, laptop = read_far, own_laptop
    port = host_port_of(laptop.app_url(far, far.echo_port))
    stalled = http.client.HTTPConnection(app_host(port), port, timeout=30)
    stalled.request("GET", f"/bytes?n={1024 * 1024 * 1024}")
    response = stalled.getresponse()
    response.read(1024)  # under way, then never read again: its window fills up
    try:
        for index in range(20):
            assert request(port, path=f"/meanwhile-{index}")[0] == 200
        size = 8 * 1024 * 1024
        status, _, body = request(port, path=f"/bytes?n={size}")
        assert status == 200 and len(body) == size
    finally:
        stalled.close()


def _wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"still false after {timeout}s"
        time.sleep(0.05)


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _listening_ports(pid: int) -> set[int]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and fields[9] in inodes:
            ports.add(int(fields[1].split(":")[1], 16))
    return ports


def _serve_stdio_pids(laptop: Laptop) -> list[int]:
    """The serve-stdio processes this laptop's connect started (its --via children)."""
    found = []
    for pid in processes_with("sandbridge.cli serve-stdio"):
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == laptop.process.popen.pid:
                found.append(pid)
    return found


def test_killing_the_link_mid_download_reconnects_at_the_same_origin(
    read_far: Far, own_laptop: Laptop
) -> None:
    far, laptop = read_far, own_laptop
    url = laptop.app_url(far, far.echo_port)
    port = host_port_of(url)
    assert request(port, path="/before")[0] == 200
    pid = laptop.process.popen.pid
    fds_before = _fds(pid)
    listening_before = _listening_ports(pid)
    [first] = _serve_stdio_pids(laptop)

    conn = http.client.HTTPConnection(app_host(port), port, timeout=30)
    conn.request("GET", f"/bytes?n={1024 * 1024 * 1024}")
    response = conn.getresponse()
    assert response.status == 200
    received = len(response.read(4 * 1024 * 1024))  # the download is under way
    os.kill(first, signal.SIGKILL)
    with contextlib.suppress(http.client.IncompleteRead, ConnectionError):
        while chunk := response.read(1024 * 1024):
            received += len(chunk)
    assert received < 1024 * 1024 * 1024  # cut short, not completed from a buffer
    conn.close()
    laptop.wait_after("sandbridge: far: link lost", "sandbridge: far: connected")
    # The same local origin answers again once the far side listed the app again.
    after = request(port, path="/after")
    assert after[0] == 200, (after, laptop.process.drain())
    assert _listening_ports(pid) == listening_before
    # What the old link held is gone: at most the count before (its browser connections
    # close as their tasks end, a condition awaited, not a time).
    _wait_until(lambda: _fds(pid) <= fds_before)
    assert first not in _serve_stdio_pids(laptop)


def test_a_websocket_cut_by_the_link_opens_again_once_it_is_back(
    read_far: Far, own_laptop: Laptop
) -> None:
    far, laptop = read_far, own_laptop
    port = host_port_of(laptop.app_url(far, far.feature_port))

    async def check() -> None:
        async with ws_connect(f"ws://{app_host(port)}:{port}/ws") as ws:
            await ws.send("up")
            assert await ws.recv() == "up"
            [serve] = _serve_stdio_pids(laptop)
            os.kill(serve, signal.SIGKILL)
            with pytest.raises(ConnectionClosed):
                async with asyncio.timeout(10):
                    await ws.recv()
        # The page's own reconnect: once the link is back, the same URL opens again.
        await asyncio.to_thread(
            laptop.wait_after, "sandbridge: far: link lost", "sandbridge: far: connected"
        )
        async with ws_connect(f"ws://{app_host(port)}:{port}/ws") as again:
            await again.send("again")
            assert await again.recv() == "again"

    asyncio.run(check())


def test_far_machine_gone_for_good_is_removed_with_a_line(
    read_far: Far, laptop_xdg: Path, tmp_path: Path
) -> None:
    far = read_far  # gone for the laptop: the --via command no longer reaches it
    switch = tmp_path / "far-is-up"
    switch.touch()
    # The --via command reaches serve-stdio only while the switch file exists.
    via = shlex.join(["sh", "-c", f"test -e {switch} && exec {far.serve_stdio}"])
    laptop = Laptop(laptop_xdg, via, "--gone-after", "3")
    try:
        port = host_port_of(laptop.app_url(far, far.echo_port))
        switch.unlink()
        [serve] = _serve_stdio_pids(laptop)
        os.kill(serve, signal.SIGKILL)
        laptop.process.wait_line("sandbridge: far: gone: no link for", "stderr")
        assert laptop.process.popen.wait(10) == 1
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        assert "far" not in laptop.ls()
    finally:
        laptop.stop()


def test_connect_ending_leaves_no_process_or_listener(read_far: Far, laptop_xdg: Path) -> None:
    far = read_far
    laptop = Laptop(laptop_xdg, far.serve_stdio)
    port = host_port_of(laptop.app_url(far, far.echo_port))
    assert laptop.stop() == 0
    assert _serve_stdio_pids(laptop) == []
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert "no running sessions" in laptop.ls()


def test_via_command_that_does_not_run_is_said_and_retried(laptop_xdg: Path) -> None:
    laptop = Laptop(laptop_xdg, "/nonexistent/serve-stdio", "--gone-after", "1")
    try:
        laptop.process.wait_line(
            "sandbridge: far: cannot connect: --via '/nonexistent/serve-stdio': No such file",
            "stderr",
        )
        assert laptop.process.popen.wait(10) == 1
    finally:
        laptop.stop()


def test_far_stderr_lines_arrive_prefixed_and_defanged(laptop_xdg: Path) -> None:
    via = shlex.join(["sh", "-c", r"printf 'boom \033[2J here\n' >&2; exit 3"])
    laptop = Laptop(laptop_xdg, via, "--gone-after", "1")
    try:
        laptop.process.wait_line("far: boom ?[2J here", "stderr")
    finally:
        laptop.stop()


HOSTILE_FAR = str(REPO / "tests" / "apps" / "hostile_far.py")


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("open", "a far side may not send OPEN"),
        ("garbage", "unknown frame kind 200"),
        ("early", "DATA for stream 1 before it was opened"),
        ("many", "APPS lists more than 1024 apps"),
        ("empty", "DATA of 0 bytes for stream 1"),
    ],
)
def test_a_far_side_breaking_the_protocol_is_dropped_and_said(
    mode: str, said: str, laptop_xdg: Path, localhost_names_resolve: None
) -> None:
    laptop = Laptop(laptop_xdg, shlex.join([PYTHON, HOSTILE_FAR, mode]))
    try:
        if mode in ("early", "empty"):
            line = laptop.wait_containing("sandbridge: far: evil port 8080 -> ")
            with contextlib.suppress(OSError, http.client.HTTPException):
                request(host_port_of(line.rsplit(" ", 1)[1]), path="/")
        # Said, whether the frame came with the far side's HELLO (cannot connect) or
        # after it (link lost), and tried again.
        first = laptop.wait_containing(said)
        seen = laptop.process.lines["stderr"]
        laptop.process.lines["stderr"] = seen[seen.index(first) + 1 :]
        # It tries again (and, but for "early", which waits for a request, fails again).
        laptop.wait_containing("connected" if mode in ("early", "empty") else said)
        assert laptop.process.popen.poll() is None
        # A far side chooses no more local listeners than its apps within the limits:
        # here the one app it listed before breaking the protocol.
        assert len(_listening_ports(laptop.process.popen.pid)) <= 1
    finally:
        assert laptop.stop() == 0


def test_a_far_side_churning_its_app_list_is_applied_calmly(
    laptop_xdg: Path, localhost_names_resolve: None
) -> None:
    """1,000 lists of 300 apps in a burst: the laptop ends up serving the last list,
    having said it in a few lines and without opening a listener per list."""
    laptop = Laptop(laptop_xdg, shlex.join([PYTHON, HOSTILE_FAR, "churn"]))
    try:

        def served() -> list[int]:
            listed = json.loads(laptop.ls("--json"))
            return [app["port"] for entry in listed if entry["machine"] for app in entry["apps"]]

        _wait_until(lambda: served() == [9999], timeout=60)
        assert len(_listening_ports(laptop.process.popen.pid)) == 1
    except AssertionError as failed:  # what connect said, for whoever reads the failure
        failed.add_note(f"connect said: {laptop.process.drain('stderr')[-4000:]}")
        failed.add_note(f"ls --json: {laptop.ls('--json')[:2000]}")
        raise
    finally:
        status = laptop.stop()
        assert status == 0, f"connect ended with {status}"
    assert laptop.process.popen.stderr is not None
    said = laptop.process.popen.stderr.read().decode().splitlines()
    assert len(said) < 20, said[:40]
    # The last list is said as a burst's summary when a 300-app list was applied before
    # it, or app by app when the laptop, which parses only the list it applies, skipped
    # every one of them (the first list's 8080 gone, 9999 served).
    assert any(line.endswith("1 served; sandbridge ls lists them)") for line in said) or (
        said[-2:]
        == [
            "sandbridge: far: evil port 8080 is gone",
            f"sandbridge: far: evil port 9999 -> {said[-1].split(' -> ', 1)[-1]}",
        ]
    ), said


def test_lists_overtaken_before_they_are_applied_are_never_parsed(
    laptop_xdg: Path, localhost_names_resolve: None
) -> None:
    """150 malformed lists, then a good one, all before the laptop applies its next list:
    only the latest is parsed (a far side sending lists at the link's speed costs no
    parsing of the others), so the malformed ones end nothing. A malformed latest list
    still ends the link naming why (``many`` above)."""
    laptop = Laptop(laptop_xdg, shlex.join([PYTHON, HOSTILE_FAR, "overtaken"]))
    try:
        laptop.wait_containing("sandbridge: far: evil port 9999 -> ")
        assert laptop.process.popen.poll() is None
    finally:
        assert laptop.stop() == 0
    assert laptop.process.popen.stderr is not None
    said = laptop.process.lines["stderr"] + laptop.process.popen.stderr.read().decode().splitlines()
    assert not [line for line in said if "link lost" in line or "protocol" in line], said


def test_apps_the_laptop_cannot_listen_for_are_said_in_one_line(
    laptop_xdg: Path, localhost_names_resolve: None
) -> None:
    """Out of descriptors (connect under a limit of 100, 200 apps listed): the apps that
    got a listener are served, the rest said in one line, and connect goes on (the app
    follower used to die of an IndexError, silently, and follow no list again)."""
    laptop = Laptop(
        laptop_xdg,
        shlex.join([PYTHON, HOSTILE_FAR, "crowd"]),
        prefix=("prlimit", "--nofile=100:100"),
    )
    try:
        line = laptop.wait_containing("apps not served: cannot listen: ")
        assert "[Errno 24]" in line and "out of descriptors" in line
        added = laptop.wait_containing("apps added, ")
        count = int(added.split(": ")[2].split()[0])
        assert 0 < count < 200
        assert f"{200 - count} apps not served" in line
        assert len(_listening_ports(laptop.process.popen.pid)) == count
        assert laptop.process.popen.poll() is None
    finally:
        assert laptop.stop() == 0


# --- a private far app: the laptop's own token and cookie, the far token stays far ------


@pytest.fixture
def private_far(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Far]:
    with far_machine(tmp_path, monkeypatch, daemon=False, private=True) as machine:
        yield machine


@pytest.fixture
def private_laptop(
    private_far: Far, laptop_xdg: Path, localhost_names_resolve: None
) -> Iterator[Laptop]:
    running = Laptop(laptop_xdg, private_far.serve_stdio)
    try:
        yield running
    finally:
        running.stop()


def _token(url: str) -> str:
    [token] = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)[TOKEN_PARAM]
    return token


def _open_with_token(url: str) -> str:
    """Open a private app's URL with its token, as a browser does; the cookie it sets."""
    parts = urllib.parse.urlsplit(url)
    status, headers, _ = request(host_port_of(url), path=f"{parts.path}?{parts.query}")
    assert status == 303, (status, headers)
    assert headers["Location"] == parts.path
    return headers["Set-Cookie"].split(";")[0]


def test_private_far_app_is_refused_without_its_token_as_a_local_one_is(
    private_far: Far, private_laptop: Laptop
) -> None:
    url = private_laptop.app_url(private_far, private_far.echo_port)
    assert f"?{TOKEN_PARAM}=" in url
    port = host_port_of(url)
    local = host_port_of(private_far.echo_url)  # the far session's own private listener
    for path in ("/", f"/?{TOKEN_PARAM}=guess"):
        on_laptop, on_far = request(port, path=path), request(local, path=path)
        assert on_laptop[0] == on_far[0] == 403
        assert on_laptop[2] == on_far[2]
    # The far machine's own token opens nothing on the laptop.
    assert request(port, path=f"/?{TOKEN_PARAM}={_token(private_far.echo_url)}")[0] == 403


def test_private_far_apps_token_url_sets_the_cookie_that_admits_requests(
    private_far: Far, private_laptop: Laptop
) -> None:
    url = private_laptop.app_url(private_far, private_far.echo_port)
    port = host_port_of(url)
    cookie = _open_with_token(url)
    status, _, body = request(port, path="/inside?x=1", headers={"Cookie": cookie})
    assert status == 200, body
    assert json.loads(body)["path"] == "/inside?x=1"
    # One time only, as for a local private app.
    assert (
        request(port, path=urllib.parse.urlsplit(url).path + "?" + f"{TOKEN_PARAM}={_token(url)}")[
            0
        ]
        == 403
    )


def test_private_far_apps_cookie_works_at_the_same_origin_after_a_reconnect(
    private_far: Far, private_laptop: Laptop
) -> None:
    url = private_laptop.app_url(private_far, private_far.echo_port)
    port = host_port_of(url)
    cookie = _open_with_token(url)
    assert request(port, path="/before", headers={"Cookie": cookie})[0] == 200
    [first] = _serve_stdio_pids(private_laptop)
    os.kill(first, signal.SIGKILL)
    private_laptop.wait_after("sandbridge: far: link lost", "sandbridge: far: connected")
    after = request(port, path="/after", headers={"Cookie": cookie})
    assert after[0] == 200, after
    assert json.loads(after[2])["path"] == "/after"
    assert request(port, path="/")[0] == 403  # and still private


def test_private_far_app_is_listed_private_and_no_token_is_written(
    private_far: Far, private_laptop: Laptop, laptop_xdg: Path
) -> None:
    url = private_laptop.app_url(private_far, private_far.echo_port)
    far_token, laptop_token = _token(private_far.echo_url), _token(url)
    assert far_token != laptop_token
    token_free = url.split("?", 1)[0]
    text = private_laptop.ls()
    assert f"port {private_far.echo_port} -> {token_free}  (private)" in text
    listed = json.loads(private_laptop.ls("--json"))
    [app] = [
        app
        for entry in listed
        if entry["machine"] == "far"
        for app in entry["apps"]
        if app["port"] == private_far.echo_port
    ]
    assert app["private"] is True and app["url"] == token_free
    written = [path.read_bytes() for path in laptop_xdg.rglob("*") if path.is_file()]
    assert written and not any(
        token.encode() in data for data in written for token in (far_token, laptop_token)
    )
    assert private_laptop.stop() == 0
    said = "\n".join(private_laptop.process.lines["stderr"]) + private_laptop.process.drain()
    assert far_token not in said + text + json.dumps(listed)
    assert said.count(laptop_token) == 1  # said once, in the line announcing the app


# --- what a far side's app lists leave on the laptop ------------------------------------


def test_far_sessions_that_come_and_go_leave_no_state_behind() -> None:
    """A far side naming fresh sessions in every list (a few thousand a second, applied
    every 0.5 s): the laptop keeps state for the sessions listed now, not for every
    session name ever listed (a scope each piled up, without bound, before)."""

    async def no_link() -> Link:
        raise RemoteLinkError("not used here")

    async def check() -> None:
        machine = Machine("far", no_link, out=io.StringIO())
        try:
            for round_ in range(5):
                apps = tuple(
                    FarApp(f"s-{round_}-{i}", 8000 + i, "/", private=i % 2 == 0) for i in range(20)
                )
                await machine._apply(apps)
                assert len(machine.listeners) == 20
                assert len(machine._scopes) == 20
        finally:
            await machine._drop_all()
        assert machine._scopes == {}

    asyncio.run(check())


def test_an_app_connect_announces_is_already_one_ls_lists(
    laptop_xdg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whoever reads connect's line about an app and runs ``sandbridge ls`` finds it
    there: the record is written before the line is said (said first, ls could list
    the machine without the app, as it did once in CI)."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(laptop_xdg))

    async def no_link() -> Link:
        raise RemoteLinkError("not used here")

    class Reader(io.StringIO):
        """The owner's terminal: each line it gets is checked against ls's records."""

        def __init__(self) -> None:
            super().__init__()
            self.listed_when_said: list[tuple[str, list[int]]] = []

        def write(self, text: str) -> int:
            [record] = list_remotes()
            self.listed_when_said.append((text, [app.port for app in record.apps]))
            return super().write(text)

    async def check() -> list[tuple[str, list[int]]]:
        out = Reader()
        machine = Machine("far", no_link, RemoteEntry.create("far", "test"), out=out)
        try:
            await machine._apply((FarApp("s-1", 8000, "/"), FarApp("s-1", 8001, "/")))
            await machine._apply((FarApp("s-1", 8001, "/"),))
        finally:
            await machine._drop_all()
        return out.listed_when_said

    said = [(text.strip(), ports) for text, ports in asyncio.run(check()) if text.strip()]
    assert [(text.split(": s-1 ", 1)[1].split(" -> ")[0], ports) for text, ports in said] == [
        ("port 8000", [8000, 8001]),
        ("port 8001", [8000, 8001]),
        ("port 8000 is gone", [8001]),
    ]


def test_a_far_side_churning_a_few_apps_prints_a_bounded_number_of_lines() -> None:
    """Two lists of 8 apps, alternating at the pace the laptop applies them: 16 lines
    a list (8 gone, 8 added), 32 a second for as long as the far side likes, each a
    write to the owner's terminal on connect's one event loop. Past the budget they
    are counted and said in one line."""

    async def no_link() -> Link:
        raise RemoteLinkError("not used here")

    async def check() -> str:
        out = io.StringIO()
        machine = Machine("far", no_link, out=out)
        lists = [tuple(FarApp("evil", port, "/") for port in range(f, f + 8)) for f in (1, 101)]
        try:
            for index in range(20):
                await machine._apply(lists[index % 2])
        finally:
            await machine._drop_all()
        return out.getvalue()

    said = asyncio.run(check()).splitlines()
    assert len(said) <= APP_LINES_PER_MINUTE + 1, said[-5:]
    assert said[APP_LINES_PER_MINUTE].endswith(
        "are counted, not shown (over 60 a minute; sandbridge ls lists them)"
    ), said[-5:]


def test_a_far_side_filling_every_stream_costs_the_laptop_at_most_its_budget(
    laptop_xdg: Path, localhost_names_resolve: None
) -> None:
    """Every connection a browser opens to a far app answered with a response head and
    a whole window (2 MiB) that the browser never reads: past the link's budget the
    laptop resets the streams holding the most, says so to the far side, and keeps
    serving (no reset came before: 48 streams held 96 MiB, 1,024 would hold 2 GiB)."""
    laptop = Laptop(laptop_xdg, shlex.join([PYTHON, HOSTILE_FAR, "fill"]))
    clients: list[socket.socket] = []
    try:
        line = laptop.wait_containing("sandbridge: far: evil port 8080 -> ")
        port = host_port_of(line.rsplit(" ", 1)[1])
        for _ in range(48):
            client = socket.socket()
            # A browser that reads nothing: once the kernel's queue toward it is full
            # (a few MiB), the relay stops taking the stream's bytes, and they wait.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            client.connect(("127.0.0.1", port))
            client.sendall(b"GET / HTTP/1.1\r\nHost: " + host_field(port) + b"\r\n\r\n")
            clients.append(client)
        said = laptop.process.wait_line("far: reset ", "stderr")
        assert "over the link's budget of 67108864 bytes held" in said
        assert laptop.process.popen.poll() is None
        # And it still serves: a new connection gets its answer.
        with socket.create_connection(("127.0.0.1", port), timeout=30) as probe:
            probe.sendall(b"GET / HTTP/1.1\r\nHost: " + host_field(port) + b"\r\n\r\n")
            assert probe.recv(64).startswith(b"HTTP/1.1 200 ")
    finally:
        for client in clients:
            client.close()
        assert laptop.stop() == 0
