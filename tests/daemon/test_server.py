"""The daemon serving sessions: who may ask, what it checks, and that sessions stay apart."""

from __future__ import annotations

import array
import contextlib
import http.client
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbridge.places.registry import SessionEntry
from sandbridge.places.runtime_dir import RuntimeDir
from sandbridge.protocol import daemon_wire
from sandbridge.session.options import SessionOptions
from sandbridge.session.options_wire import encode
from tests.conftest import (
    ECHO_APP,
    PYTHON,
    REPO,
    SANDBRIDGE,
    Process,
    host_port_of,
    port_is_open,
    request,
    run_argv,
    start_daemon,
)
from tests.terminals.harness import PROMPT, TerminalSession, finish

SABOTEUR = str(REPO / "tests" / "apps" / "saboteur.py")
HOSTILE_SHIM = str(REPO / "tests" / "peers" / "hostile_shim.py")
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
# Reads the daemon's one answer to a request and prints it (run as another user).
ASK = """
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
sock.connect(sys.argv[1])
try:
    sock.send(b'{"version":1}')
except OSError:
    pass  # refused at once, before the request: the answer is waiting all the same
try:
    answer = sock.recv(65536)
except ConnectionResetError:
    # The request landed after the daemon had read what was queued, and its close with
    # the request unread reports a reset first; the answer comes next (as run reads it).
    answer = sock.recv(65536)
print(answer.decode(), flush=True)
"""


def socket_path(xdg: Path) -> Path:
    return xdg / f"sandbridge-{os.getuid()}" / "daemon.sock"


def ask(xdg: Path, message: bytes, fds: list[int] | None = None) -> dict[str, object]:
    """Send one request to the daemon; return its first answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        sock.settimeout(10)
        sock.connect(str(socket_path(xdg)))
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds or []).tobytes())]
        sock.sendmsg([message], rights if fds else [])
        answer: dict[str, object] = json.loads(sock.recv(65536))
        return answer


def session(workdir: Path, *command: str) -> tuple[Process, int]:
    """A ``run`` session of ``command`` (which prints READY with its URLs), and the
    host port of its first app."""
    process = Process(run_argv(workdir, *command))
    report = json.loads(process.wait_line("READY", timeout=60).removeprefix("READY "))
    urls = report.get("urls") or [report["good_url"]]
    return process, host_port_of(str(urls[0]))


def attack(port: int, path: str) -> None:
    """A request the hostile app never answers well; how it ends does not matter."""
    with contextlib.suppress(OSError, http.client.HTTPException):
        request(port, path=path)


def wait_until(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{condition} still false after {timeout}s"
        time.sleep(0.05)


@dataclass(frozen=True)
class Asked:
    """A daemon the tests only ask, and its XDG_RUNTIME_DIR."""

    daemon: Process
    xdg: Path


@pytest.fixture(scope="module")
def asked_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Asked]:
    """One daemon for the tests that only ask it requests it refuses (and see it serve
    on): each brings its own runtime dir, session and descriptors, and leaves none
    behind."""
    xdg = tmp_path_factory.mktemp("xdg")
    xdg.chmod(0o700)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_RUNTIME_DIR", str(xdg))
        process = start_daemon()
    try:
        yield Asked(process, xdg)
    finally:
        process.stop()


@pytest.fixture
def asked(asked_daemon: Asked, monkeypatch: pytest.MonkeyPatch) -> Asked:
    """That daemon, its XDG_RUNTIME_DIR this test's (the sessions it starts are its)."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(asked_daemon.xdg))
    return asked_daemon


def test_peer_of_another_uid_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # Even with the state root opened up by mistake, the peer's uid is checked.
    xdg = Path(tempfile.mkdtemp(prefix="sandbridge-peer-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    daemon = start_daemon()
    try:
        os.chmod(xdg, 0o711)
        os.chmod(socket_path(xdg).parent, 0o711)
        os.chmod(socket_path(xdg), 0o666)
        client = Process([*AS_NOBODY, "/usr/bin/python3", "-c", ASK, str(socket_path(xdg))])
        answer = json.loads(client.wait_line("{"))
        assert answer == {"error": "uid 65534 is not the daemon's user; use your own daemon"}
        daemon.wait_line("sandbridge: daemon.refused ", "stderr")
    finally:
        daemon.stop()
        shutil.rmtree(xdg, ignore_errors=True)


def test_sandbox_that_reaches_the_daemon_socket_is_refused(
    backend: str, daemon: Process, xdg: Path, tmp_path: Path
) -> None:
    # However daemon.sock got into a sandbox (here a hard link in its workdir; a runtime
    # dir that holds the state root did it for containers), the sandbox, of the same
    # uid, is told apart by its mount namespace and never served.
    work = tmp_path / "work"
    work.mkdir()
    os.link(socket_path(xdg), work / "daemon.sock")
    probe = ["/usr/bin/python3", "-c", ASK, str(work / "daemon.sock")]
    result = subprocess.run(
        run_argv(work, *probe, options=("--backend", backend, "--no-daemon")),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    answer = json.loads(result.stdout)
    assert "is not in the daemon's mount namespace (a sandbox or a container)" in str(
        answer["error"]
    ), result.stderr
    daemon.wait_line("sandbridge: daemon.refused ", "stderr")


def test_request_of_another_protocol_version_is_refused(asked: Asked) -> None:
    xdg = asked.xdg
    answer = ask(xdg, b'{"version": 99}')
    assert "protocol version 99 is not 1" in str(answer["error"])


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (b"\x00\xff", "message is not valid JSON"),
        (b"[1]", "a daemon message must be a JSON object"),
        (b'{"version": 1}', "a daemon request needs its session's options under 'serve'"),
    ],
)
def test_malformed_request_is_refused_and_the_daemon_serves_on(
    asked: Asked, tmp_path: Path, message: bytes, error: str
) -> None:
    xdg = asked.xdg
    assert str(ask(xdg, message)["error"]).startswith(error)
    process, port = session(tmp_path, PYTHON, ECHO_APP, "--register", "4173")
    assert request(port)[0] == 200
    process.stop()


def test_descriptor_that_is_not_the_named_dir_is_refused(asked: Asked, tmp_path: Path) -> None:
    xdg = asked.xdg
    runtime, other = tmp_path / "runtime", tmp_path / "other"
    runtime.mkdir(mode=0o700)
    other.mkdir(mode=0o700)
    fds = [os.open(other, os.O_RDONLY | os.O_DIRECTORY) for _ in range(2)]
    message = json.dumps(
        {"version": 1, "serve": {}, "runtime_dir": str(runtime), "session_dir": str(other)}
    )
    try:
        answer = ask(xdg, message.encode(), fds)
    finally:
        for fd in fds:
            os.close(fd)
    assert answer == {"error": f"runtime dir {runtime} is not the directory sent with it"}


def test_runtime_dir_that_holds_the_daemon_socket_is_refused(asked: Asked, tmp_path: Path) -> None:
    xdg = asked.xdg
    # Its sandbox would see the daemon's socket and every session's control socket.
    root = socket_path(xdg).parent
    entry = SessionEntry.create("exposed", tmp_path)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        message = daemon_wire.request(
            encode(SessionOptions(workdir=tmp_path)), str(root), str(entry.path)
        )
        answer = ask(xdg, message, [fd, entry.fd])
    finally:
        os.close(fd)
        entry.remove()
    assert str(answer["error"]).startswith(f"runtime dir {root}: it is {root}, sandbridge's own")
    assert not (root / "relay.sock").exists()


@pytest.mark.parametrize("kind", ["FIFO", "directory", "TCP socket", "stream socket"])
def test_a_third_descriptor_that_is_no_terminal_channel_is_refused_and_not_kept(
    asked: Asked, tmp_path: Path, kind: str
) -> None:
    daemon, xdg = asked.daemon, asked.xdg
    runtime = RuntimeDir.create(xdg / "ags-webview-relay-channel")
    entry = SessionEntry.create("channel", tmp_path)
    os.mkfifo(tmp_path / "fifo")
    held: list[socket.socket] = []
    if kind == "FIFO":
        fd = os.open(tmp_path / "fifo", os.O_RDONLY | os.O_NONBLOCK)
    elif kind == "directory":
        fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    elif kind == "TCP socket":
        held = [socket.create_server(("127.0.0.1", 0))]
    else:
        held = list(socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM))
    if held:
        fd = os.dup(held[0].fileno())
    before = len(os.listdir(f"/proc/{daemon.popen.pid}/fd"))
    try:
        message = daemon_wire.request(
            encode(SessionOptions(workdir=tmp_path)), str(runtime.path), str(entry.path)
        )
        answer = ask(xdg, message, [runtime.fd, entry.fd, fd])
    finally:
        os.close(fd)
        for sock in held:
            sock.close()
        entry.remove()
        runtime.remove()
    assert answer == {
        "error": "the third descriptor is not a terminal channel (a Unix SOCK_SEQPACKET socket)"
    }
    wait_until(lambda: len(os.listdir(f"/proc/{daemon.popen.pid}/fd")) <= before)


def test_request_without_descriptors_is_refused(asked: Asked) -> None:
    xdg = asked.xdg
    message = b'{"version":1,"serve":{},"runtime_dir":"/x","session_dir":"/y"}'
    assert ask(xdg, message) == {"error": "a request carries 2 or 3 descriptors, not 0"}


def test_a_daemon_out_of_descriptors_keeps_running_and_serves_once_they_are_back(
    xdg: Path, tmp_path: Path
) -> None:
    # Descriptors run out (here: clients that send nothing; as well, browser connections
    # to the apps of every session): accept() fails with EMFILE, which ended the daemon
    # and every session's host half with it.
    daemon = Process(["prlimit", "--nofile=64:64", *SANDBRIDGE, "daemon"])
    daemon.wait_line("sandbridge: daemon ", "stderr")

    def descriptors() -> int:
        return len(os.listdir(f"/proc/{daemon.popen.pid}/fd"))

    baseline = descriptors()
    idle = []
    try:
        for _ in range(100):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            sock.connect(str(socket_path(xdg)))
            idle.append(sock)
        daemon.wait_line("sandbridge: daemon.accept_failed ", "stderr")
        for sock in idle:
            sock.close()
        # The daemon takes the rest of them, refuses each (it sent nothing), lets go.
        wait_until(lambda: descriptors() <= baseline, timeout=30)
        process, port = session(tmp_path, PYTHON, ECHO_APP, "--register", "4173")
        assert request(port)[0] == 200
        process.stop()
        assert daemon.popen.poll() is None
        daemon.wait_line("sandbridge: daemon.session ", "stderr")
    finally:
        for sock in idle:
            sock.close()
        daemon.stop()


def test_client_leaving_ends_its_session_only(daemon: Process, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, first_port = session(tmp_path / "a", PYTHON, ECHO_APP, "--register", "4173")
    second, second_port = session(tmp_path / "b", PYTHON, ECHO_APP, "--register", "4173")
    try:
        # SIGKILL: the client says nothing; its connection to the daemon just closes.
        first.stop(signal.SIGKILL)
        wait_until(lambda: not port_is_open(first_port))
        daemon.wait_line("sandbridge: daemon.session_end ", "stderr")
        assert request(second_port)[0] == 200
    finally:
        second.stop()


def test_hostile_session_does_not_stall_a_good_one(
    daemon: Process, tmp_path: Path, xdg: Path
) -> None:
    good_dir, bad_dir = tmp_path / "good", tmp_path / "bad"
    good_dir.mkdir()
    bad_dir.mkdir()
    os.mkfifo(bad_dir / "release")
    good, good_port = session(good_dir, PYTHON, ECHO_APP, "--register", "4173")
    # The daemon connects to the session's apps itself (the shim is never asked): the
    # hostile answers come from an app.
    bad = Process(run_argv(bad_dir, PYTHON, SABOTEUR, "hostile-app", HOSTILE_SHIM))
    try:
        report = json.loads(bad.wait_line("READY", timeout=60).removeprefix("READY "))
        bad_port = host_port_of(str(report["victim_url"]))
        # Stalls and floods of header bytes hold the hostile session's connections open.
        attacks = [
            threading.Thread(target=attack, args=(bad_port, f"/hostile/{b}"), daemon=True)
            for b in ("stall", "unending-headers", "stall-mid-body") * 4
        ]
        for thread in attacks:
            thread.start()
        for _ in range(20):
            started = time.monotonic()
            assert request(good_port)[0] == 200
            assert time.monotonic() - started < 1.0
        assert request(bad_port, path="/hostile/garbage")[0] == 502
        # The hostile session crashing (its client killed) ends that session only.
        bad.stop(signal.SIGKILL)
        wait_until(lambda: not port_is_open(bad_port))
        assert request(good_port)[0] == 200
    finally:
        bad.stop()
        good.stop()


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_restarted_daemon_brings_back_apps_at_their_urls_and_pending_requests(
    tmp_path: Path, stop: signal.Signals
) -> None:
    (tmp_path / "xdg").mkdir(mode=0o700)
    env = {  # the dirs TerminalSession gives its session
        **os.environ,
        "XDG_RUNTIME_DIR": str(tmp_path / "xdg"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    daemon = start_daemon(env=env)
    session = TerminalSession(tmp_path, command=f"exec {PYTHON} {ECHO_APP} --register 4173")
    try:
        report = json.loads(session.process.wait_line("READY").removeprefix("READY "))
        url = str(report["urls"][0])
        port = host_port_of(url)
        assert request(port)[0] == 200
        request_id = session.request()

        daemon.stop(stop)
        wait_until(lambda: not port_is_open(port))
        daemon = start_daemon(env=session.env)
        session.process.wait_line("sandbridge: the daemon serves this session again", "stderr")

        assert session.process.wait_line("sandbridge: sandbox port 4173 -> ", "stderr").endswith(
            url
        )
        assert request(port)[0] == 200, "the app answers at its old URL"
        listed = json.loads(session.cli("terminal", "list", "--json").stdout)
        assert [(r["id"], r["state"]) for r in listed] == [(request_id, "pending")]
        session.cli("terminal", "approve", request_id, "--duration", "60")
        child = session.attach(request_id)
        child.expect(PROMPT)
        child.sendline("exit 3")
        assert finish(child)[0] == 3
    finally:
        session.stop()
        daemon.stop()


def test_a_sandbox_blocking_its_socket_from_being_bound_again_costs_the_daemon_nothing(
    tmp_path: Path,
) -> None:
    """The sandbox writes its runtime dir: it replaces relay.sock with a directory, which
    the restarted daemon cannot unlink to bind the socket anew. That failure kept the
    session's runtime dir and entry descriptors (and the dir's lock) in the daemon, and
    the client asks again every 0.2 s: a leak of two descriptors per ask, toward the
    daemon's limit, which every session shares. It is a refusal naming the path, and
    costs nothing."""
    (tmp_path / "xdg").mkdir(mode=0o700)
    env = {
        **os.environ,
        "XDG_RUNTIME_DIR": str(tmp_path / "xdg"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    daemon = start_daemon(env=env)
    relay_sock = "/run/ags-webview-relay/relay.sock"
    session = TerminalSession(
        tmp_path, command=f"rm {relay_sock} && mkdir {relay_sock} && echo planted && exec sleep 600"
    )
    try:
        session.process.wait_line("planted")
        [runtime] = (tmp_path / "xdg").glob("ags-webview-relay-*")
        daemon.stop(signal.SIGKILL)
        daemon = start_daemon(env=session.env)
        failures = ("sandbridge: daemon.refused ", "sandbridge: daemon.session_failed ")

        def descriptors() -> int:
            return len(os.listdir(f"/proc/{daemon.popen.pid}/fd"))

        def fewest_descriptors(first: int) -> int:
            # Read right after each of five refusals: an ask being answered at that moment
            # still holds its connection and the descriptors it carries, so one reading
            # can be a few above the daemon's own; the fewest of five is not.
            counts = []
            for count in range(first, first + 5):
                daemon.wait_lines(failures, count, "stderr")
                counts.append(descriptors())
            return min(counts)

        # From the tenth refusal on (what the daemon opens once, on its first asks, is
        # open by then), ten asks later: the leak kept two descriptors an ask (20 more).
        # A loaded machine can put all five readings inside asks being answered, so after
        # the twentieth the count is watched until it is back at the daemon's own: with
        # the leak it never is, as every ask adds to it.
        before = fewest_descriptors(10)
        daemon.wait_lines(failures, 20, "stderr")
        deadline = time.monotonic() + 10
        while (now := descriptors()) > before and time.monotonic() < deadline:
            time.sleep(0.05)  # observation interval of a measurement, not synchronisation
        assert now <= before, f"{before} descriptors at the tenth ask, {now} after the 20th"
        said = session.process.wait_line("sandbridge: the daemon cannot serve", "stderr")
        assert said == (
            "sandbridge: the daemon cannot serve this session yet: the daemon refused the "
            f"session: {runtime / 'relay.sock'}: cannot be removed to be bound anew (Is a "
            "directory); the session is not served again (the sandbox can write its runtime "
            "dir) (--no-daemon serves it without the daemon)"
        )
    finally:
        session.stop()
        daemon.stop()


def test_ended_sessions_leave_no_descriptors_in_the_daemon(daemon: Process, tmp_path: Path) -> None:
    def descriptors() -> int:
        return len(os.listdir(f"/proc/{daemon.popen.pid}/fd"))

    def one_session() -> None:
        process, port = session(tmp_path, PYTHON, ECHO_APP, "--register", "4173")
        assert request(port)[0] == 200
        process.stop()

    one_session()  # the first one starts what the daemon keeps (closer threads, logs)
    daemon.wait_line("sandbridge: daemon.session_end ", "stderr")
    baseline = descriptors()
    for _ in range(3):
        one_session()
    wait_until(lambda: descriptors() <= baseline)


def test_session_dir_outside_the_state_roots_is_refused_and_nothing_kept(
    daemon: Process, xdg: Path, tmp_path: Path
) -> None:
    runtime, elsewhere = tmp_path / "runtime", tmp_path / "elsewhere"
    runtime.mkdir(mode=0o700)
    elsewhere.mkdir(mode=0o700)
    before = len(os.listdir(f"/proc/{daemon.popen.pid}/fd"))
    fds = [os.open(path, os.O_RDONLY | os.O_DIRECTORY) for path in (runtime, elsewhere)]
    message = json.dumps(
        {"version": 1, "serve": {}, "runtime_dir": str(runtime), "session_dir": str(elsewhere)}
    )
    try:
        answer = ask(xdg, message.encode(), fds)
    finally:
        for fd in fds:
            os.close(fd)
    assert answer == {"error": f"session dir {elsewhere} is not in a state root of this user"}
    wait_until(lambda: len(os.listdir(f"/proc/{daemon.popen.pid}/fd")) <= before)


def test_a_session_failing_in_the_daemon_ends_only_itself(
    daemon: Process, xdg: Path, tmp_path: Path
) -> None:
    good, good_port = session(tmp_path, PYTHON, ECHO_APP, "--register", "4173")
    runtime = RuntimeDir.create(xdg / "ags-webview-relay-broken")
    entry = SessionEntry.create("broken", tmp_path)
    (runtime.path / "relay.sock").mkdir()  # the registration socket cannot be bound
    (runtime.path / "relay.sock" / "kept").write_text("")  # nor removed
    try:
        message = daemon_wire.request(
            encode(SessionOptions(workdir=tmp_path)), str(runtime.path), str(entry.path)
        )
        answer = ask(xdg, message, [runtime.fd, entry.fd])
        assert str(answer["error"]).startswith(
            f"{runtime.path / 'relay.sock'}: cannot be removed to be bound anew"
        )
        assert request(good_port)[0] == 200
        good.stop()
        # The daemon still opens sessions.
        again, again_port = session(tmp_path, PYTHON, ECHO_APP, "--register", "4173")
        assert request(again_port)[0] == 200
        again.stop()
    finally:
        good.stop()
        entry.remove()
        runtime.remove()


def test_the_daemon_dumps_no_core_into_its_working_directory(xdg: Path, tmp_path: Path) -> None:
    # The daemon holds every session's private app tokens, the dashboard's cookie, the
    # owner key while it signs an approval from the page, and each thin client's whole
    # environment as it passes its run on: with `ulimit -c unlimited` and core_pattern
    # `core`, a crash wrote all of it into its working directory, often a project's.
    def unlimited_cores() -> None:
        hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
        resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))

    daemon = start_daemon(cwd=tmp_path, preexec_fn=unlimited_cores)
    try:
        limits = Path(f"/proc/{daemon.popen.pid}/limits").read_text()
    finally:
        daemon.stop()
    [line] = [line for line in limits.splitlines() if line.startswith("Max core file size")]
    assert line.split()[4] == "0", line


def test_connections_that_send_nothing_do_not_count_as_sessions(
    daemon: Process, xdg: Path, tmp_path: Path
) -> None:
    # The session limit counted every client connection, served or not: a few hundred
    # connections that had not sent their request yet (each dropped after 10 s, and
    # opened again) had every new session refused "the daemon already serves 256 sessions".
    idle = []
    try:
        for _ in range(300):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            sock.connect(str(socket_path(xdg)))
            idle.append(sock)
        result = subprocess.run(
            run_argv(tmp_path, "true"), capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stderr
        daemon.wait_line("sandbridge: daemon.session ", "stderr")
    finally:
        for sock in idle:
            sock.close()
