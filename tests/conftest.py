"""Shared test machinery: real processes, real sockets, waits on output, never sleeps."""

from __future__ import annotations

import compileall
import contextlib
import http.client
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from tests import file_seconds
from tests.private_home import UserState, make_private_environment
from tests.rewrite_ahead import rewrite_ahead

# Fixtures shared across test folders: the real container engine (``container_engine``)
# and the recorded stand-in for the hostile cases (``replay_engine``).
pytest_plugins = ["tests.support.container_engine", "tests.support.docker_replay"]

# Never the user's home, state or config (tests/private_home.py): what those hold is noted
# first, then this process and every child it starts get a private HOME and XDG_* tree,
# before anything imports sandbridge; the run fails if the user's changed meanwhile.
USER_ENVIRONMENT = dict(os.environ)
USER_STATE = UserState.take(USER_ENVIRONMENT)
PRIVATE_TREE = make_private_environment(os.environ)
# The temporary root this run made (see pytest_configure), removed when the run passed.
_MADE_ROOT = pytest.StashKey[Path]()


@pytest.hookimpl(trylast=True)  # after the last fixtures' teardown
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Once every test is done (under pytest-xdist, in the controller, once every worker
    is: a worker ends while others still run sessions): the run fails if the user's
    sandbridge directories changed, each change named, their metadata alone read."""
    shutil.rmtree(PRIVATE_TREE, ignore_errors=True)
    if hasattr(session.config, "workerinput"):
        return
    changes = USER_STATE.changes(UserState.take(USER_ENVIRONMENT))
    if changes:
        reporter = session.config.pluginmanager.getplugin("terminalreporter")
        assert isinstance(reporter, pytest.TerminalReporter)
        # A session of the user's own (or a suite without this isolation) running
        # meanwhile shows here too: each line names the path, for the reader to tell.
        reporter.line("")
        reporter.write_sep("=", "the user's own sandbridge state changed during the run", red=True)
        for line in changes:
            reporter.write_line(line, red=True)
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    # The run's temporary root (pytest_configure) goes when every test passed; a failed
    # run keeps it to look at.
    root = session.config.stash.get(_MADE_ROOT, None)
    if root is not None and session.exitstatus == pytest.ExitCode.OK:
        shutil.rmtree(root, ignore_errors=True)


REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SANDBRIDGE = [PYTHON, "-m", "sandbridge.cli"]
ECHO_APP = str(REPO / "tests" / "apps" / "echo_app.py")
HELPER = [PYTHON, "-m", "sandbridge.relay.inside.url_helper"]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Give the run a short temporary root of its own.

    Tests put runtime directories, and so Unix sockets, under ``tmp_path``; a socket's path
    may have at most 107 bytes. pytest's default root (``/tmp/pytest-of-USER/pytest-N``)
    plus pytest-xdist's ``popen-gwN`` and a test's name leave too little for
    ``xdg/ags-webview-relay-PID/relay.sock``. A fresh ``/tmp/sbt-XXXXXXXX`` per run keeps
    the paths short and never touches another run's root (another session of the same
    user may be testing beside this one). xdist's workers get their root from this one.
    """
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        config.option.basetemp = tempfile.mkdtemp(prefix="sbt-")
        config.stash[_MADE_ROOT] = Path(config.option.basetemp)
    if config.getoption("record_file_seconds") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(file_seconds.Recorder(), "file_seconds_recorder")
    if not hasattr(config, "workerinput"):
        compile_checkout()
        rewrite_ahead(config, REPO / "tests")


def compile_checkout() -> None:
    """Write the bytecode of the checkout's modules once, before any worker starts, as
    installing the package does (benchmarks/sessions.py does the same for its starts).

    The suite starts thousands of Python processes (``sandbridge run``, its sandbox's
    entry and shim, daemons, far machines); with ``PYTHONDONTWRITEBYTECODE`` set, as on
    some machines and images, none of them writes what it compiles, and each compiled
    every sandbridge module it imports anew: a third of a session's start. Inside a
    sandbox the checkout is read-only, so the bytecode has to be there before.
    ``compileall`` skips a module whose bytecode is current (a stat each)."""
    for tree in ("src", "tests", "benchmarks"):
        compileall.compile_dir(REPO / tree, quiet=1)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-file-seconds",
        action="store_true",
        help="write each test file's measured seconds to tests/file_seconds.json (the "
        "order ./dev.sh test runs the files in: longest first)",
    )


# Hypothesis: the "ci" profile (the default) is sized for the suite's time on two cores;
# HYPOTHESIS_PROFILE=deep runs ten times the examples, for a change to a parser or a
# decision; "fast", a quarter of them, is the inner loop's (`./dev.sh test --fast` loads
# it unless HYPOTHESIS_PROFILE names another). A test that names its own max_examples
# keeps it in every profile. The mutation fuzzers' iterations follow the profile
# (tests/fuzz/test_fuzz_parsers.py).
settings.register_profile("ci", max_examples=100, deadline=None)
settings.register_profile("deep", max_examples=1000, deadline=None)
settings.register_profile("fast", max_examples=25, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# What `./dev.sh test --fast` leaves out (`-m "not slow"`): the places and files below,
# whose tests start real sandboxes, browsers, daemons, far machines or builds, seconds
# each, and tests elsewhere marked with STARTS_A_SANDBOX or STARTS_A_DAEMON. What stays
# (the sans-I/O cores, the relay's and the gate's pieces on real sockets and real
# processes, the CLI, lint and types) takes over two minutes on two cores: README.
# A test elsewhere that starts a real sandbox or a daemon says so with one of these.
STARTS_A_SANDBOX = pytest.mark.slow
STARTS_A_DAEMON = pytest.mark.slow
SLOW_DIRECTORIES = frozenset({"e2e", "session", "sandbox", "remote", "daemon", "benchmarks"})
SLOW_FILES = frozenset(
    {
        "test_front.py",  # 64 real sessions through the C front door
        "test_install.py",
        "test_fuzz_front_c.py",  # builds with clang, fuzzes for a bounded time
        "test_front_sanitized.py",  # builds the front door with ASan and UBSan
        "test_container_engine.py",  # starts real container engines (podman)
        "test_real_engine.py",  # a real engine (podman) reached from a real sandbox
        "test_docker_recorder.py",  # records a scenario against a real engine
        "test_thin_run.py",  # real daemons building real sandboxes
        "test_run_builder.py",  # the daemon's run builder: a real daemon, real sandboxes
        "test_light_gate.py",  # a real sandbox in a test-made internet
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of :data:`SLOW_DIRECTORIES` and :data:`SLOW_FILES` (and every
    ``*_in_sandbox.py`` and ``*_e2e.py``) ``slow``; order the files longest first
    (tests/file_seconds.py)."""
    file_seconds.longest_first(items, file_seconds.load())
    for item in items:
        path = item.path.relative_to(REPO / "tests")
        if (
            path.parts[0] in SLOW_DIRECTORIES
            or path.name in SLOW_FILES
            or path.name.endswith(("_in_sandbox.py", "_e2e.py"))
        ):
            item.add_marker(pytest.mark.slow)


class Process:
    """A child process whose output lines can be awaited with a deadline."""

    def __init__(self, argv: list[str], **kwargs: object) -> None:
        self.argv = argv
        self.popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            **kwargs,  # type: ignore[call-overload]
        )
        self._buffers = {"stdout": b"", "stderr": b""}
        self.lines: dict[str, list[str]] = {"stdout": [], "stderr": []}

    def _pipe(self, name: str) -> int:
        pipe = self.popen.stdout if name == "stdout" else self.popen.stderr
        assert pipe is not None
        fd: int = pipe.fileno()
        return fd

    def wait_line(self, prefix: str, stream: str = "stdout", timeout: float = 30.0) -> str:
        """Return the first output line starting with ``prefix`` (waits for output, not time)."""
        for line in self.lines[stream]:
            if line.startswith(prefix):
                return line
        deadline = time.monotonic() + timeout
        fd = self._pipe(stream)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"no line starting {prefix!r} on {stream} of {self.argv[:4]} within "
                    f"{timeout}s; {stream} so far: {self.lines[stream]!r}; stderr: "
                    f"{self.lines['stderr'][-5:]!r}"
                )
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            data = os.read(fd, 65536)
            if not data:
                raise AssertionError(
                    f"{self.argv[:4]} closed {stream} before {prefix!r}; lines: "
                    f"{self.lines[stream]!r}; stderr: {self.drain('stderr')!r}"
                )
            self._buffers[stream] += data
            *complete, self._buffers[stream] = self._buffers[stream].split(b"\n")
            # Keep every line read, also those after the one awaited: a later wait may want them.
            lines = [raw.decode("utf-8", "replace") for raw in complete]
            self.lines[stream] += lines
            for line in lines:
                if line.startswith(prefix):
                    return line

    def wait_lines(
        self,
        prefix: str | tuple[str, ...],
        count: int,
        stream: str = "stdout",
        timeout: float = 30.0,
    ) -> list[str]:
        """The output lines starting with ``prefix`` (one of them, for a tuple) once there
        are ``count`` of them (waits for output, not time)."""
        deadline = time.monotonic() + timeout
        while (
            len(found := [line for line in self.lines[stream] if line.startswith(prefix)]) < count
        ):
            remaining = deadline - time.monotonic()
            assert remaining > 0, (
                f"{len(found)} of {count} lines starting {prefix!r} on {stream} of "
                f"{self.argv[:4]} within {timeout}s; last lines: {self.lines[stream][-5:]!r}"
            )
            fd = self._pipe(stream)
            if not select.select([fd], [], [], remaining)[0]:
                continue
            data = os.read(fd, 65536)
            assert data, f"{self.argv[:4]} closed {stream}; lines: {self.lines[stream][-5:]!r}"
            self._buffers[stream] += data
            *complete, self._buffers[stream] = self._buffers[stream].split(b"\n")
            self.lines[stream] += [raw.decode("utf-8", "replace") for raw in complete]
        return found

    def drain(self, stream: str = "stderr") -> str:
        """Whatever is readable now on ``stream`` (for error messages)."""
        fd = self._pipe(stream)
        chunks = []
        while select.select([fd], [], [], 0)[0]:
            data = os.read(fd, 65536)
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks).decode("utf-8", "replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        status: int = self.popen.wait(timeout)
        return status


# Shared objects whose mapping shows a process loaded the event loop: asyncio's C part,
# OpenSSL (which asyncio imports), uvloop. The sandbox's entry serves without them.
EVENT_LOOP_LIBRARIES = ("_asyncio", "_ssl", "uvloop")


def event_loop_libraries(pid: int) -> list[str]:
    """Which of :data:`EVENT_LOOP_LIBRARIES` process ``pid`` has mapped."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return [name for name in EVENT_LOOP_LIBRARIES if name in maps]


def memory_kib(pid: int, field_name: str = "VmRSS") -> int:
    """A memory field of process ``pid``'s status (``VmRSS``, ``VmHWM``), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field_name}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field_name} for {pid}")


def run_module(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m ARGS`` from the checkout (a benchmark, say), its output captured as text;
    the exit status is the caller's to check."""
    return subprocess.run(
        [PYTHON, "-m", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_argv(workdir: Path, *command: str, options: tuple[str, ...] = ()) -> list[str]:
    """``sandbridge run`` of ``command`` in ``workdir``, with the checkout visible inside
    (the test apps live there, and the checkout may lie under /tmp, private inside)."""
    return [
        *SANDBRIDGE,
        "run",
        "--workdir",
        str(workdir),
        "--ro-bind",
        str(REPO),
        *options,
        "--",
        *command,
    ]


def processes_with(marker: str) -> list[int]:
    """Pids whose command line (arguments joined by spaces) contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline.replace(b"\0", b" "):
                found.append(int(entry.name))
    return found


def _chosen_ports() -> Iterator[int]:
    """The ports :func:`free_port` tries, in turn: below the kernel's ephemeral range
    (``net.ipv4.ip_local_port_range``), where any process's outgoing connection can take
    a port between the test's choice and its bind; each pytest-xdist worker a slice of its
    own, so two workers never choose the same one; a port comes again only once its
    worker went through the whole slice."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    size = (low - FREE_PORTS_FROM) // workers
    assert size >= 256, f"ephemeral ports start at {low}: too few below for the tests"
    start = FREE_PORTS_FROM + worker * size
    while True:
        yield from range(start, start + size)


# Where the tests' own ports start (see _chosen_ports): above the well-known and the
# usual development ports (3000, 5173, 8000, 8888: a test may run a real app on those).
FREE_PORTS_FROM = 10000
_CHOSEN_PORTS = _chosen_ports()


def free_port() -> int:
    """A port nothing listens on at 127.0.0.1, for a test's app to bind next."""
    for _ in range(4096):
        port = next(_CHOSEN_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use (a test's app still running, another program's)
            return port
    raise AssertionError("no free port among 4096 tried below the ephemeral range")


def port_is_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


# The host name of each app port a test learned from a registered URL (host_port_of):
# ``<label>.localhost`` in the default URL form, absent in the IP form.
APP_NAMES: dict[int, str] = {}


def app_host(port: int) -> str:
    """The name to connect to for an app port: its ``<label>.localhost`` if the test
    learned one, else ``127.0.0.1`` (the IP form, or a port that is no app)."""
    return APP_NAMES.get(port, "127.0.0.1")


def host_field(port: int) -> bytes:
    """The Host a browser sends to this app port (for raw requests)."""
    return f"{app_host(port)}:{port}".encode()


_system_getaddrinfo = socket.getaddrinfo


def _getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
    # Browsers and curl resolve every name under localhost to loopback themselves;
    # glibc here does not (no nss-myhostname), so Python clients in tests get the same.
    if isinstance(host, str | bytes):
        name = host.decode() if isinstance(host, bytes) else host
        if name.lower().rstrip(".").endswith(".localhost"):
            host = "127.0.0.1"
    return _system_getaddrinfo(host, *args, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def localhost_names_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    """``*.localhost`` resolves to 127.0.0.1 in this process, as in browsers and curl."""
    monkeypatch.setattr(socket, "getaddrinfo", _getaddrinfo)


def request(
    url_port: int,
    method: str = "GET",
    path: str = "/",
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection; returns status, headers, body."""
    conn = http.client.HTTPConnection(app_host(url_port), url_port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def echo(url_port: int, path: str = "/", **kwargs: object) -> dict[str, object]:
    status, _, body = request(url_port, path=path, **kwargs)  # type: ignore[arg-type]
    assert status == 200, body
    report: dict[str, object] = json.loads(body)
    return report


def host_port_of(url: str) -> int:
    """The host port of an app URL; remembers its host name for :func:`app_host`."""
    parsed = urllib.parse.urlsplit(url)
    assert parsed.port is not None and parsed.hostname is not None, url
    if parsed.hostname.endswith(".localhost"):
        APP_NAMES[parsed.port] = parsed.hostname
    else:  # the IP form: a name an earlier test's app had on this port is gone with it
        APP_NAMES.pop(parsed.port, None)
    return parsed.port


def raw_exchange(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send raw bytes, read until the relay closes the connection."""
    with socket.create_connection((app_host(port), port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


class Relay:
    """``sandbridge host`` plus ``sandbridge shim`` on one runtime dir, outside any sandbox."""

    def __init__(
        self,
        runtime_dir: Path,
        protocol: str = "auto",
        shim: list[str] | None = None,
        shim_ready: str = "sandbridge: shim listening",
        host_args: tuple[str, ...] = (),
    ) -> None:
        self.runtime_dir = runtime_dir
        # Both start at once: the shim only listens on upstream.sock, which the host
        # connects to per request, so neither waits for the other to be ready.
        shim_argv = shim or [*SANDBRIDGE, "shim", "--socket", str(runtime_dir / "upstream.sock")]
        self.shim = Process(shim_argv)
        self.host = Process(
            [
                *SANDBRIDGE,
                "host",
                "--runtime-dir",
                str(runtime_dir),
                "--protocol",
                protocol,
                "-v",
                *host_args,
            ]
        )
        try:
            self.host.wait_line("sandbridge: serving registrations", "stderr")
            self.shim.wait_line(shim_ready, "stderr")
        except BaseException:
            self.shim.popen.kill()
            self.host.popen.kill()
            raise

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "AGS_WEBVIEW_RELAY_SOCKET": str(self.runtime_dir / "relay.sock")}

    def register(self, port: int, base: str = "/") -> str:
        result = subprocess.run(
            [*HELPER, str(port), base], env=self.env, capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    def stop(self) -> None:
        self.shim.stop()
        self.host.stop()


@pytest.fixture
def runtime_dir(tmp_path: Path) -> Path:
    path = tmp_path / "rt"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def app_port() -> Iterator[int]:
    port = free_port()
    app = Process([PYTHON, ECHO_APP, "--listen", str(port)])
    app.wait_line("READY")
    yield port
    app.stop()


@pytest.fixture
def relay(runtime_dir: Path) -> Iterator[Relay]:
    relay = Relay(runtime_dir)
    yield relay
    relay.stop()


@contextlib.contextmanager
def module_relay(
    factory: pytest.TempPathFactory,
    shim: list[str] | None = None,
    shim_ready: str = "sandbridge: shim listening",
    host_args: tuple[str, ...] = (),
) -> Iterator[Relay]:
    """A :class:`Relay` on a runtime dir of its own, for a module-scoped fixture: one
    relay serves every test of a module whose tests each register apps of their own and
    leave the relay serving (a relay's start is two processes' imports; a test that broke
    it fails every test after it, loudly). ``shim`` gets the runtime dir's upstream.sock."""
    runtime = factory.mktemp("relay") / "rt"
    runtime.mkdir(mode=0o700)
    shim_argv = None if shim is None else [*shim, str(runtime / "upstream.sock")]
    relay = Relay(runtime, shim=shim_argv, shim_ready=shim_ready, host_args=host_args)
    try:
        yield relay
    finally:
        relay.stop()


@pytest.fixture(scope="module")
def shared_app_port() -> Iterator[int]:
    """The echo app for every test of a module (it keeps nothing between requests)."""
    port = free_port()
    app = Process([PYTHON, ECHO_APP, "--listen", str(port)])
    app.wait_line("READY")
    yield port
    app.stop()


# Every loopback address an app may choose, as echo_app.py's --bind options: its
# toolchain's default decides (Node's ``localhost`` is ``::1`` where /etc/hosts lists it
# first), and the relay reaches each (protocol/app_address.py).
LOOPBACK_BINDS = {
    "127.0.0.1": ("--bind", "127.0.0.1"),
    "::1 only": ("--bind", "::1", "--v6only"),
    "0.0.0.0": ("--bind", "0.0.0.0"),
    ":: dual stack": ("--bind", "::"),
    ":: IPv6 only": ("--bind", "::", "--v6only"),
}


@pytest.fixture(scope="module", params=list(LOOPBACK_BINDS))
def loopback_app(request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    """The echo app on each loopback address in turn: the address's name and the port."""
    port = free_port()
    app = Process([PYTHON, ECHO_APP, "--listen", str(port), *LOOPBACK_BINDS[request.param]])
    app.wait_line("READY")
    yield request.param, port
    app.stop()


# --- sandbox backends, and a user without privileges ---------------------------------

BACKENDS = ["bwrap", "unshare"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private XDG_RUNTIME_DIR so each test sees only its own runtime dirs."""
    path = tmp_path / "xdg"
    path.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(path))
    return path


NOBODY = 65534


@dataclass
class Nobody:
    """``sandbridge run`` as nobody, with Debian's python3 (the test's own Python may live
    under /root, out of nobody's reach), in a work dir and runtime base nobody owns."""

    work: Path
    xdg: Path

    @property
    def env(self) -> dict[str, str]:
        site = next(p for p in sys.path if p.endswith("site-packages") and ".venv" in p)
        return {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.work),
            "XDG_RUNTIME_DIR": str(self.xdg),
            "PYTHONPATH": f"{REPO / 'src'}:{site}:{REPO}",
        }

    def run_argv(self, backend: str, *options: str) -> list[str]:
        """The command line up to (not including) ``-- CMD``."""
        return [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            "/usr/bin/python3",
            "-m",
            "sandbridge.cli",
            "run",
            "--backend",
            backend,
            "--workdir",
            str(self.work),
            "--ro-bind",
            str(REPO),
            "--env",
            "PYTHONPATH",
            *options,
        ]


@pytest.fixture
def nobody() -> Iterator[Nobody]:
    assert os.getuid() == 0, "this test switches to an unprivileged user and needs root"
    top = Path(tempfile.mkdtemp(prefix="sandbridge-unpriv-", dir="/tmp"))
    os.chmod(top, 0o755)
    work, xdg = top / "work", top / "xdg"
    work.mkdir()
    xdg.mkdir(mode=0o700)
    for path in (work, xdg):
        os.chown(path, NOBODY, NOBODY)
    yield Nobody(work, xdg)
    shutil.rmtree(top, ignore_errors=True)


def start_daemon(*options: str, **kwargs: object) -> Process:
    """``sandbridge daemon`` for this test's XDG_RUNTIME_DIR, once it serves."""
    process = Process([*SANDBRIDGE, "daemon", *options], **kwargs)
    process.wait_line("sandbridge: daemon ", "stderr")
    return process


@pytest.fixture
def daemon(xdg: Path) -> Iterator[Process]:
    """The user's daemon (in this test's private XDG_RUNTIME_DIR)."""
    process = start_daemon()
    yield process
    process.stop()


@pytest.fixture(params=["standalone", "daemon"])
def served(request: pytest.FixtureRequest, xdg: Path) -> Iterator[Process | None]:
    """Each mode of ``sandbridge run``: its own host half, or the daemon's (started here)."""
    if request.param == "standalone":
        yield None
        return
    process = start_daemon()
    yield process
    process.stop()


def is_sandbox_entry(pid: int) -> bool:
    """Whether ``pid`` is a sandbox's entry (``SandboxSpec.entry_argv``: ``python -I -S -c``
    naming ``sandbridge.sandbox.entry``), not the backend whose command line names it."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return argv[1:4] == [b"-I", b"-S", b"-c"] and b"sandbridge.sandbox.entry" in argv[4]


def read_to_end(sock: socket.socket) -> bytes:
    """Everything ``sock`` receives until its peer ends."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def silent_unix_server(path: Path) -> tuple[socket.socket, list[socket.socket]]:
    """A Unix socket server at ``path`` that takes every connection and never answers (a
    session whose host is stopped, a far machine that stays silent): the listening socket,
    and the connections it took, held open until the test closes them."""
    from sandbridge.places.socket_path import short_path  # (a path of any length)

    server = socket.socket(socket.AF_UNIX)
    with short_path(path) as short:
        server.bind(str(short))
    server.listen()
    held: list[socket.socket] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])

    threading.Thread(target=serve, daemon=True).start()
    return server, held


# The sandbox's side of a race: two names (a folder and a link to another one) swap
# places (renameat2 RENAME_EXCHANGE) as fast as the kernel lets them, until stopped.
SWAPPER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
print("swapping", flush=True)
while True:
    if libc.renameat2(-100, a, -100, b, 2) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")
"""


@contextlib.contextmanager
def swapping(first: Path, second: Path) -> Iterator[Process]:
    """:data:`SWAPPER` at work on ``first`` and ``second`` while the block runs; the
    block's end checks that it was still at work."""
    swapper = Process([PYTHON, "-c", SWAPPER, str(first), str(second)])
    try:
        swapper.wait_line("swapping")
        yield swapper
        assert swapper.popen.poll() is None, "the swapper stopped"
    finally:
        swapper.stop()
