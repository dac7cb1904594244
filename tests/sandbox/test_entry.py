"""The sandbox entry: its command line, and an idle sandbox that loads the shim's code
only when something connects (real sandboxes: tests/session/test_run.py covers the rest
of its contract)."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from sandbridge.protocol.shim_opening import FIRST_LINE_TIMEOUT
from sandbridge.sandbox import entry
from tests.conftest import PYTHON, Process, is_sandbox_entry, processes_with, run_argv


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (
            ["--upstream-socket", "/x", "--bogus", "1", "--", "true"],
            "unrecognized argument: --bogus",
        ),
        (["--upstream-socket"], "argument --upstream-socket: expected one argument"),
        (["--upstream-socket", "/x", "--gate-port", "eighty", "--", "true"], "invalid int value"),
        (["--upstream-socket", "/x", "--terminal-fd=x", "--", "true"], "invalid int value"),
        (["--", "true"], "the following arguments are required: --upstream-socket"),
        (["--upstream-socket", "/x"], "no command given"),
        (["--upstream-socket", "/x", "--"], "no command given"),
        (["--upstream-socket", "/x", "--publish", "0", "--", "true"], "--publish '0'"),
        (["--upstream-socket", "/x", "--publish-rule", "1-2:loud", "--", "true"], "loud"),
    ],
)
def test_a_bad_command_line_is_refused_before_anything_starts(
    argv: list[str], refusal: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert entry.main(argv) == 2
    error = capsys.readouterr().err
    assert error.startswith("sandbridge-sandbox-entry: error: ")
    assert refusal in error


def test_options_take_both_spellings_and_the_command_keeps_its_own_options() -> None:
    options = entry._Options(
        ["--upstream-socket=/u.sock", "--gate", "100.64.0.1", "--gate-port", "3128",
         "--gate-port=5432", "--terminal-fd", "7", "--", "ls", "--upstream-socket", "-l"]
    )  # fmt: skip
    assert options.upstream_socket == "/u.sock"
    assert options.gate == "100.64.0.1"
    assert options.gate_port == [3128, 5432]
    assert options.terminal_fd == 7
    assert options.command == ["ls", "--upstream-socket", "-l"]


def test_a_command_without_the_separator_starts_at_the_first_word() -> None:
    options = entry._Options(["--upstream-socket", "/u.sock", "true", "--x"])
    assert options.command == ["true", "--x"]


# A v1 request (which only the event loop's shim serves) to a port nothing listens on.
_V1_TO_NOWHERE = b'{"type":"http_request","port":1,"method":"GET","path":"/"}\n'


def _serve_one(upstream: Path) -> bytes:
    """Connect to the shim and send a v1 request for a port nothing listens on: its
    answer (an error line, then the end) proves it served, with the event loop."""
    return _exchange(upstream, _V1_TO_NOWHERE)


def _exchange(upstream: Path, data: bytes) -> bytes:
    """Send ``data`` on a connection to the shim; its answer, read to the end."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(upstream))
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def _mapped(pid: int, name: str) -> bool:
    return name in Path(f"/proc/{pid}/maps").read_text()


def test_an_idle_sandbox_loads_the_event_loop_only_when_a_connection_needs_it(
    backend: str, tmp_path: Path, xdg: Path
) -> None:
    marker = f"idle-entry-{os.getpid()}-{backend}"
    process = Process(
        run_argv(
            tmp_path,
            "sh",
            "-c",
            "echo started; exec sleep 600",
            marker,
            options=("--backend", backend, "--net", "none", "--no-daemon"),
        )
    )
    try:
        process.wait_line("started")
        (pid,) = [pid for pid in processes_with(marker) if is_sandbox_entry(pid)]
        assert not _mapped(pid, "uvloop")  # listening, the command running, nothing loaded
        upstream = xdg / f"ags-webview-relay-{process.popen.pid}" / "upstream.sock"
        assert _exchange(upstream, b"{}\n").startswith(b'{"ok":false')
        assert not _mapped(pid, "uvloop")  # a refusal is the light shim's
        assert _serve_one(upstream).startswith(b'{"ok":false')
        assert _mapped(pid, "uvloop")
    finally:
        process.stop()


@pytest.mark.parametrize("served", ["idle", "light shim", "event loop"])
def test_sigterm_to_the_entry_reaches_the_command(
    backend: str, tmp_path: Path, xdg: Path, served: str
) -> None:
    marker = f"term-entry-{os.getpid()}-{backend}-{served.replace(' ', '-')}"
    script = "trap 'echo got-term; exit 5' TERM; echo started; sleep 600 & wait"
    process = Process(
        run_argv(
            tmp_path,
            "sh",
            "-c",
            script,
            marker,
            options=("--backend", backend, "--net", "none", "--no-daemon"),
        )
    )
    try:
        process.wait_line("started")
        (pid,) = [pid for pid in processes_with(marker) if is_sandbox_entry(pid)]
        upstream = xdg / f"ags-webview-relay-{process.popen.pid}" / "upstream.sock"
        if served == "light shim":  # a refusal: served without the event loop
            assert _exchange(upstream, b"{}\n").startswith(b'{"ok":false')
            assert not _mapped(pid, "uvloop")
        elif served == "event loop":
            _serve_one(upstream)
            assert _mapped(pid, "uvloop")
        os.kill(pid, signal.SIGTERM)
        process.wait_line("got-term")
        assert process.popen.wait(30) == 5
    finally:
        process.stop()


# The command, as the entry's child: take every descriptor of its parent (the entry) it
# can with pidfd_getfd(2) (x86-64's syscall 438), and say what it got.
_GRAB_ENTRY_DESCRIPTORS = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
pidfd = os.pidfd_open(os.getppid())
got = [fd for fd in range(3, 256) if libc.syscall(438, pidfd, fd, 0) >= 0]
print("grabbed", got, os.strerror(ctypes.get_errno()), flush=True)
"""


def test_the_command_cannot_take_the_entrys_descriptors(
    backend: str, tmp_path: Path, xdg: Path
) -> None:
    """Same uid, same namespaces: without more, the command could take the entry's
    listeners and the host's terminal channel through pidfd_getfd or ptrace. The entry
    makes itself non-dumpable before the command starts."""
    process = Process(
        run_argv(
            tmp_path,
            PYTHON,
            "-c",
            _GRAB_ENTRY_DESCRIPTORS,
            options=("--backend", backend, "--net", "none", "--no-daemon"),
        )
    )
    try:
        line = process.wait_line("grabbed")
        assert line == "grabbed [] Operation not permitted"
        assert process.popen.wait(30) == 0
    finally:
        process.stop()


# The command, hostile to its own entry: fill upstream.sock with connections that say
# nothing, cut the entry's descriptor limit to a dozen (prlimit(2) works on a process of
# the same user), make it load the event loop with a v1 line, and exit with status 7.
_FLOOD_THE_ENTRY = """
import os, resource, socket, sys
path = os.environ["AGS_WEBVIEW_RELAY_UPSTREAM_SOCKET"]
def is_entry(argv):  # python -I -S -c "...sandbridge.sandbox.entry..." (spec.entry_argv)
    return argv[1:4] == [b"-I", b"-S", b"-c"] and b"sandbridge.sandbox.entry" in argv[4]
(entry,) = [int(p) for p in os.listdir("/proc") if p.isdigit()
            and is_entry(open(f"/proc/{p}/cmdline", "rb").read().split(b"\\0"))]
held = []
for _ in range(2000):
    sock = socket.socket(socket.AF_UNIX)
    sock.setblocking(False)
    try:
        sock.connect(path)
    except OSError:  # the listener's queue is full
        sock.close()
        break
    held.append(sock)
resource.prlimit(entry, resource.RLIMIT_NOFILE, (12, 12))
loud = socket.socket(socket.AF_UNIX)
loud.connect(path)
loud.sendall(b'{"type":"http_request","port":1,"method":"GET","path":"/"}\\n')
print("flooded", len(held), flush=True)
sys.exit(7)
"""


def test_a_command_flooding_its_entry_still_ends_with_its_own_status(
    backend: str, tmp_path: Path
) -> None:
    """Silent connections the entry holds, its descriptor limit cut under it, the event
    loop loaded meanwhile: the command's end still ends the session at once (not after
    the first-line timeout of the connections held) with the command's status."""
    process = Process(
        run_argv(
            tmp_path,
            PYTHON,
            "-c",
            _FLOOD_THE_ENTRY,
            options=("--backend", backend, "--net", "none", "--no-daemon"),
        )
    )
    try:
        flooded = process.wait_line("flooded")
        assert int(flooded.split()[1]) > 100
        assert process.popen.wait(timeout=FIRST_LINE_TIMEOUT / 2) == 7
    finally:
        process.stop()


def test_modules_in_the_workdir_are_not_the_entrys(backend: str, tmp_path: Path, xdg: Path) -> None:
    # The workdir is the entry's working directory, and the sandbox writes it: a module
    # a sandbox left there (the standard library's `select`, sandbridge itself) must
    # not run in the next session's entry, which holds the host's terminal channel.
    planted = "import pathlib; pathlib.Path(__file__).with_name('planted-ran').touch()\n"
    (tmp_path / "select.py").write_text(planted)
    (tmp_path / "sandbridge").mkdir()
    (tmp_path / "sandbridge" / "__init__.py").write_text(planted)
    process = Process(
        run_argv(tmp_path, "echo", "started", options=("--backend", backend, "--no-daemon"))
    )
    process.wait_line("started")
    assert process.popen.wait(60) == 0
    assert not (tmp_path / "planted-ran").exists()
    assert not (tmp_path / "sandbridge" / "planted-ran").exists()


def test_the_start_gate_opens_on_one_byte_and_stays_shut_when_closed() -> None:
    # A thin client's run starts the sandbox while the daemon serves the session; the
    # command starts on the byte the client writes once it is served, never if the
    # client closes the pipe without one (the daemon refused: the sandbox is killed).
    for written, opens in ((b"s", True), (b"", False)):
        reader, writer = os.pipe()
        os.write(writer, written)
        os.close(writer)
        assert entry._allowed_to_start(reader) is opens
        with pytest.raises(OSError):
            os.fstat(reader)  # closed: the command never inherits it


def test_the_start_gate_is_an_option_of_the_entry() -> None:
    options = entry._Options(["--upstream-socket", "/u.sock", "--start-fd=9", "--", "true"])
    assert options.start_fd == 9


def test_the_entry_sends_its_network_namespace_and_closes_the_socket() -> None:
    # The host makes its app connections from sockets of this namespace
    # (relay/host/owned_upstream.py); the command never inherits the socket it came on.
    host_end, entry_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fd = entry_end.detach()
    entry._send_namespace(fd)
    with pytest.raises(OSError):
        os.fstat(fd)
    data, ancdata, _, _ = host_end.recvmsg(1, socket.CMSG_SPACE(4))
    assert data == b"n" and len(ancdata) == 1
    namespace = int.from_bytes(ancdata[0][2], "little")
    mine = os.stat("/proc/self/ns/net")
    assert (os.fstat(namespace).st_ino, os.fstat(namespace).st_dev) == (mine.st_ino, mine.st_dev)
    os.close(namespace)
    assert host_end.recv(1) == b""  # and nothing more: the entry's end is closed
    host_end.close()


def test_the_namespace_socket_is_an_option_of_the_entry() -> None:
    options = entry._Options(["--upstream-socket", "/u.sock", "--namespace-fd=11", "--", "true"])
    assert options.namespace_fd == 11
