"""``sandbridge serve-stdio`` as a hostile laptop sees it: a real far process driven with
raw frames (protocol/remote_wire.py); it serves only this user's registered apps."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.places.registry import AppRecord, SessionEntry
from sandbridge.places.registry_watch import FALLBACK_POLL_SECONDS, MIN_READ_GAP
from sandbridge.protocol.jsonline import encode_object
from sandbridge.protocol.limits import MAX_BASE_PATH_LENGTH
from sandbridge.protocol.remote_wire import (
    HEADER,
    MAX_APPS,
    VERSION,
    Apps,
    AppsListed,
    Data,
    Event,
    FarApp,
    Kind,
    LinkState,
    Opened,
    Refused,
    Role,
    parse_apps,
)
from sandbridge.remote.far import this_users_apps
from sandbridge.remote.transport import LINK_PIPE_BYTES
from tests.conftest import ECHO_APP, PYTHON, REPO, SANDBRIDGE, Process, Relay, free_port


class FarProcess:
    """serve-stdio with pipes, and the laptop's side of the protocol in this test."""

    def __init__(self, xdg: Path, prefix: tuple[str, ...] = ()) -> None:
        self.popen = subprocess.Popen(
            [*prefix, *SANDBRIDGE, "serve-stdio"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "XDG_RUNTIME_DIR": str(xdg)},
        )
        self.state = LinkState(Role.LAPTOP)
        self.events: list[Event] = []

    def send(self, data: bytes) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(data)
        self.popen.stdin.flush()

    def next_event(self, timeout: float = 20.0) -> Event | Apps:
        assert self.popen.stdout is not None
        deadline = time.monotonic() + timeout
        while not self.events:
            remaining = deadline - time.monotonic()
            assert remaining > 0, "serve-stdio sent nothing in time"
            ready, _, _ = select.select([self.popen.stdout], [], [], remaining)
            if ready:
                data = os.read(self.popen.stdout.fileno(), 65536)
                assert data, f"serve-stdio ended: {self.stderr()}"
                self.events += self.state.receive(data)
        event = self.events.pop(0)
        # An APPS list parsed, as the laptop parses the one it applies.
        return parse_apps(event) if isinstance(event, AppsListed) else event

    def stderr(self) -> str:
        assert self.popen.stderr is not None
        return self.popen.stderr.read().decode(errors="replace")

    def close(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)
        for pipe in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if pipe is not None:
                pipe.close()


@contextlib.contextmanager
def _session_in(base: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, int, Relay]]:
    """A far session with one echo app; yields its XDG_RUNTIME_DIR and the app's port."""
    xdg = base / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    runtime = base / "rt"
    runtime.mkdir(mode=0o700)
    relay = Relay(runtime)
    port = free_port()
    echo = Process([PYTHON, ECHO_APP, "--listen", str(port)])
    try:
        echo.wait_line("READY")
        relay.register(port)
        yield xdg, port, relay
    finally:
        echo.stop()
        relay.stop()


@pytest.fixture
def far_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, int, Relay]]:
    """A far session of the test's own: for a test that registers or stops."""
    with _session_in(tmp_path, monkeypatch) as session:
        yield session


@pytest.fixture(scope="module")
def read_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, Relay]]:
    """One far session for the module's tests that only read from it (they register and
    stop nothing): a fresh one each, four processes, checks nothing more."""
    monkeypatch = pytest.MonkeyPatch()
    with _session_in(tmp_path_factory.mktemp("far"), monkeypatch) as session:
        monkeypatch.undo()  # its XDG_RUNTIME_DIR was for its start: FarProcess names it
        yield session


@contextlib.contextmanager
def _said_hello(xdg: Path) -> Iterator[FarProcess]:
    process = FarProcess(xdg)
    process.send(process.state.send_hello())
    try:
        yield process
    finally:
        process.close()


@pytest.fixture
def far(far_session: tuple[Path, int, Relay]) -> Iterator[FarProcess]:
    with _said_hello(far_session[0]) as process:
        yield process


@pytest.fixture
def read_far(read_session: tuple[Path, int, Relay]) -> Iterator[FarProcess]:
    """serve-stdio (its own, as each test's) of :func:`read_session`."""
    with _said_hello(read_session[0]) as process:
        yield process


def _session(xdg: Path) -> str:
    [path] = (xdg / f"sandbridge-{os.getuid()}" / "sessions").iterdir()
    return path.name


def test_hello_is_answered_with_the_users_apps(
    read_far: FarProcess, read_session: tuple[Path, int, Relay]
) -> None:
    far, (xdg, port, _) = read_far, read_session
    far.next_event()  # HELLO
    listed = far.next_event()
    assert isinstance(listed, Apps) and listed.apps == (FarApp(_session(xdg), port, "/"),)
    # And the session described for the laptop's dashboard, with its registry facts.
    [described] = listed.sessions
    assert described.id == _session(xdg) and described.started > 0


def test_an_app_registered_later_is_listed_again(
    far: FarProcess, far_session: tuple[Path, int, Relay]
) -> None:
    xdg, _port, relay = far_session
    far.next_event()
    far.next_event()
    other = free_port()
    app = Process([PYTHON, ECHO_APP, "--listen", str(other)])
    try:
        app.wait_line("READY")
        relay.register(other, "/b")
        listed = far.next_event()
        assert isinstance(listed, Apps)
        assert FarApp(_session(xdg), other, "/b") in listed.apps
    finally:
        app.stop()


def test_an_app_gone_is_listed_without_it(
    far: FarProcess, far_session: tuple[Path, int, Relay]
) -> None:
    """Its session ends (its dir removed from the registry): the next list is empty."""
    _xdg, _port, relay = far_session
    far.next_event()
    assert isinstance(listed := far.next_event(), Apps) and listed.apps
    relay.stop()
    listed = far.next_event()
    assert isinstance(listed, Apps) and listed.apps == ()


def _no_inotify(limit: str) -> tuple[str, ...]:
    """A prefix that runs a command in a user namespace of the same uid whose inotify
    ``limit`` (``/proc/sys/user/``) is 0: ``max_inotify_instances`` (no instance at all)
    or ``max_inotify_watches`` (the first watch is refused, ENOSPC)."""
    script = (
        "import os, sys; "
        f"open('/proc/sys/user/{limit}', 'w').write('0'); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    return (
        "unshare", "--user", f"--map-user={os.getuid()}", f"--map-group={os.getgid()}",
        "--keep-caps", PYTHON, "-c", script,
    )  # fmt: skip


@pytest.mark.parametrize("limit", ["max_inotify_instances", "max_inotify_watches"])
def test_without_inotify_the_registry_is_read_on_a_slow_poll_said_once(
    far_session: tuple[Path, int, Relay], limit: str
) -> None:
    xdg, _port, relay = far_session
    far = FarProcess(xdg, _no_inotify(limit))
    try:
        far.send(far.state.send_hello())
        far.next_event()
        far.next_event()
        other = free_port()
        app = Process([PYTHON, ECHO_APP, "--listen", str(other)])
        try:
            app.wait_line("READY")
            relay.register(other, "/b")
            listed = far.next_event(timeout=FALLBACK_POLL_SECONDS + 20.0)
            assert isinstance(listed, Apps)
            assert FarApp(_session(xdg), other, "/b") in listed.apps
        finally:
            app.stop()
        assert far.popen.stdin is not None
        far.popen.stdin.close()  # the laptop leaves: serve-stdio ends, its stderr whole
        assert far.popen.wait(20) == 0
        said = far.stderr()
        assert said.count("registry.watch_unavailable") == 1, said
        assert f"poll_seconds={FALLBACK_POLL_SECONDS}" in said, said
        assert "sysctl fs.inotify.max_user_" in said, said
    finally:
        far.close()


def test_a_burst_of_200_registrations_is_a_bounded_number_of_lists(
    far: FarProcess, far_session: tuple[Path, int, Relay]
) -> None:
    """200 sessions with an app each, registered as fast as this process can: the far
    side reads its registry once per burst, then at most once per MIN_READ_GAP, so the
    laptop gets a bounded number of lists, the last one with every app."""
    _xdg, _port, relay = far_session
    far.next_event()
    far.next_event()
    entries = []
    started = time.monotonic()
    try:
        for number in range(200):
            entry = SessionEntry.create(f"b{number}", Path("/"), runtime_dir=relay.runtime_dir)
            entries.append(entry)
            entry.set_apps([AppRecord(8000, 40000 + number, "/", "http://x/", False)])
        lists = 0
        listed: Event | Apps | None = None
        while not (isinstance(listed, Apps) and len(listed.apps) == 201):
            listed = far.next_event()
            lists += 1
        elapsed = time.monotonic() - started
    finally:
        for entry in entries:
            entry.remove()
    assert lists <= elapsed / MIN_READ_GAP + 2, (lists, elapsed)
    assert lists < 100, (lists, elapsed)


def test_open_of_a_registered_app_streams_its_bytes(
    read_far: FarProcess, read_session: tuple[Path, int, Relay]
) -> None:
    far, (xdg, port, _) = read_far, read_session
    far.next_event()
    far.next_event()
    stream, opening = far.state.send_open(_session(xdg), port)
    far.send(opening)
    assert far.next_event() == Opened(stream)
    far.send(
        far.state.send_data(stream, b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    )
    reply = far.next_event()
    assert isinstance(reply, Data) and reply.data.startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize(
    ("session", "port_offset", "refusal"),
    [
        ("s-nobody", 0, "no app on port {port} in session 's-nobody' of this user"),
        (None, 1, "no app on port {port1} in session '{session}' of this user"),
    ],
)
def test_open_of_anything_not_a_listed_app_is_refused_naming_it(
    read_far: FarProcess,
    read_session: tuple[Path, int, Relay],
    session: str | None,
    port_offset: int,
    refusal: str,
) -> None:
    far, (xdg, port, _) = read_far, read_session
    far.next_event()
    far.next_event()
    name = session or _session(xdg)
    target = port + port_offset
    stream, opening = far.state.send_open(name, target)
    far.send(opening)
    answer = far.next_event()
    assert isinstance(answer, Refused) and answer.stream == stream
    assert refusal.format(port=target, port1=target, session=name) in answer.reason


def test_garbage_instead_of_hello_ends_it_with_status_2_and_a_reason(
    read_session: tuple[Path, int, Relay],
) -> None:
    process = FarProcess(read_session[0])
    try:
        process.send(HEADER.pack(3, 77, 0) + b"abc")
        assert process.popen.wait(20) == 2
        assert "unknown frame kind 77" in process.stderr()
    finally:
        process.close()


def test_a_frame_over_its_limit_ends_the_link(read_far: FarProcess) -> None:
    far = read_far
    far.next_event()
    far.next_event()
    far.send(HEADER.pack(2**31, Kind.DATA, 1))
    assert far.popen.wait(20) == 2
    assert f"DATA frame of {2**31} bytes is over its limit" in far.stderr()


def test_laptop_leaving_ends_it_with_status_0(read_far: FarProcess) -> None:
    far = read_far
    far.next_event()
    assert far.popen.stdin is not None
    far.popen.stdin.close()
    assert far.popen.wait(20) == 0


def test_its_pipes_are_widened_for_bulk_downloads(read_far: FarProcess) -> None:
    far = read_far
    far.next_event()  # HELLO: serve-stdio has set its link up
    assert far.popen.stdin is not None and far.popen.stdout is not None
    for pipe in (far.popen.stdin, far.popen.stdout):
        assert fcntl.fcntl(pipe.fileno(), fcntl.F_GETPIPE_SZ) == LINK_PIPE_BYTES


@pytest.fixture
def private_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, int]]:
    """A far ``--private`` session with one echo app: its XDG_RUNTIME_DIR and the app's port."""
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    relay = Relay(runtime, host_args=("--private",))
    port = free_port()
    echo = Process([PYTHON, ECHO_APP, "--listen", str(port)])
    try:
        echo.wait_line("READY")
        relay.register(port)
        yield xdg, port
    finally:
        echo.stop()
        relay.stop()


def test_a_private_app_is_neither_listed_nor_opened_to_a_laptop_that_would_serve_it_openly(
    private_session: tuple[Path, int],
) -> None:
    xdg, port = private_session
    far = FarProcess(xdg)
    try:
        # An older laptop's HELLO: no private_apps, so it would ignore the mark.
        said = encode_object({"version": VERSION, "role": "laptop"})
        far.send(HEADER.pack(len(said), Kind.HELLO, 0) + said)
        far.next_event()
        listed = far.next_event()
        assert isinstance(listed, Apps) and listed.apps == ()
        stream, opening = far.state.send_open(_session(xdg), port)
        far.send(opening)
        answer = far.next_event()
        assert isinstance(answer, Refused) and answer.stream == stream
        assert "(or it is private)" in answer.reason
    finally:
        far.close()


def test_a_private_app_is_listed_private_and_opened_without_its_token(
    private_session: tuple[Path, int],
) -> None:
    xdg, port = private_session
    far = FarProcess(xdg)
    try:
        far.send(far.state.send_hello())
        far.next_event()
        apps = far.next_event()
        assert isinstance(apps, Apps)
        assert apps.apps == (FarApp(_session(xdg), port, "/", private=True),)
        stream, opening = far.state.send_open(_session(xdg), port)
        far.send(opening)
        assert far.next_event() == Opened(stream)
        # The far listener's gate is not on this path (the laptop's is): the session's
        # upstream answers as for an open app, with no token or cookie asked for.
        far.send(
            far.state.send_data(stream, b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        )
        reply = far.next_event()
        assert isinstance(reply, Data) and reply.data.startswith(b"HTTP/1.1 200")
    finally:
        far.close()


def test_the_app_list_always_fits_its_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seventeen sessions of 64 apps with 1 KiB base paths (the most a sandbox may
    register): more than an APPS frame holds, by count and by bytes. serve-stdio lists
    what fits instead of failing to send any list."""
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    base = "/" + "b" * (MAX_BASE_PATH_LENGTH - 1)
    entries = []
    try:
        for number in range(17):
            entry = SessionEntry.create(f"s{number}", tmp_path, runtime_dir=runtime)
            entries.append(entry)
            entry.set_apps(
                [AppRecord(port, 40000 + port, base, "http://x/", False) for port in range(1, 65)]
            )
        apps, _ = this_users_apps()
        assert 0 < len(apps) <= MAX_APPS
        assert LinkState(Role.FAR).send_apps(apps)  # fits: no RemoteWireError
    finally:
        for entry in entries:
            entry.remove()


@pytest.mark.parametrize("stdin", ["/dev/null", "README.md"])
def test_stdin_the_loop_cannot_wait_on_is_refused_naming_it(xdg: Path, stdin: str) -> None:
    # /dev/null (EOF at once) or a file: libuv aborted the process ("Fatal Python error")
    path = Path(REPO, stdin).resolve()
    with path.open("rb") as given:
        result = subprocess.run(
            [*SANDBRIDGE, "serve-stdio"],
            stdin=given,
            capture_output=True,
            text=True,
            env={**os.environ, "XDG_RUNTIME_DIR": str(xdg)},
            timeout=60,
            check=False,
        )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"sandbridge: serve-stdio: standard input is {path}, not a pipe, socket or terminal; "
        "it is the far end of sandbridge connect (run it as ssh HOST sandbridge serve-stdio, "
        "or connect --via CMD: docs/remote.md)\n"
    )
