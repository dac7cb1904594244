"""``sandbridge run`` across real namespaces, with each backend."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import (
    BACKENDS,
    ECHO_APP,
    PYTHON,
    REPO,
    SANDBRIDGE,
    Nobody,
    Process,
    echo,
    host_port_of,
    port_is_open,
    processes_with,
    request,
    run_argv,
    start_daemon,
)

# The test apps live in the checkout, which may itself be under /tmp (private inside).
SEE_REPO = ("--ro-bind", str(REPO))  # for the one test that builds its own command line


def sandboxed(
    backend: str, workdir: Path, *command: str, options: tuple[str, ...] = (), **kwargs: object
) -> Process:
    return Process(run_argv(workdir, *command, options=("--backend", backend, *options)), **kwargs)


def run_to_end(
    backend: str,
    workdir: Path,
    script: str,
    *,
    options: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        run_argv(workdir, "sh", "-c", script, options=("--backend", backend, *options)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def ready(process: Process) -> dict[str, object]:
    report: dict[str, object] = json.loads(process.wait_line("READY").removeprefix("READY "))
    return report


@dataclass
class ModuleDaemon:
    """The daemon this module's daemon-mode sessions are served by, in a runtime base of
    its own: its tests only run sessions on it (one daemon start instead of one per
    backend and test)."""

    process: Process
    xdg: Path

    def wait_served(self, pid: int) -> None:
        """Until the daemon has logged serving the session of ``sandbridge run`` ``pid``."""
        prefix = "sandbridge: daemon.session "
        count = 1
        while not any(
            f" pid={pid} " in f"{line} "
            for line in self.process.wait_lines(prefix, count, "stderr")
        ):
            count += 1


@pytest.fixture(scope="module")
def module_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleDaemon]:
    xdg = tmp_path_factory.mktemp("daemon") / "xdg"
    xdg.mkdir(mode=0o700)
    process = start_daemon(env={**os.environ, "XDG_RUNTIME_DIR": str(xdg)})
    yield ModuleDaemon(process, xdg)
    process.stop()


@pytest.fixture(params=["standalone", "daemon"])
def served(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Process | None]:
    """Each mode of ``sandbridge run`` (conftest's ``served``): its own host half, in a
    private XDG_RUNTIME_DIR, or the module's daemon's, in that daemon's. A daemon that
    died before or during the test fails it: its runs would have fallen back to the full
    command, and passed without the daemon."""
    if request.param == "standalone":
        xdg = tmp_path / "xdg"
        xdg.mkdir(mode=0o700)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
        yield None
        return
    daemon: ModuleDaemon = request.getfixturevalue("module_daemon")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(daemon.xdg))
    assert daemon.process.popen.poll() is None, "the module's daemon has ended"
    yield daemon.process
    assert daemon.process.popen.poll() is None, "the module's daemon ended in the test"


@pytest.fixture(
    scope="module",
    params=[(backend, mode) for backend in BACKENDS for mode in ("standalone", "daemon")],
    ids="-".join,
)
def app(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Process, dict[str, object]]]:
    """The echo app in a sandbox, the session served standalone (in a runtime base of its
    own) or by the module's daemon: one per backend and mode for the module, whose tests
    only ask it (a test that changes a session starts its own)."""
    backend, mode = request.param
    top = tmp_path_factory.mktemp("app")
    daemon: ModuleDaemon | None = None
    if mode == "daemon":
        daemon = request.getfixturevalue("module_daemon")
        xdg = daemon.xdg
    else:
        xdg = top / "xdg"
        xdg.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(xdg)}
    process = sandboxed(
        backend,
        top,
        PYTHON,
        ECHO_APP,
        "--register",
        "4173",
        "--register",
        "4173:/app",
        env=env,
    )
    try:
        report = ready(process)
        if daemon is not None:
            daemon.wait_served(process.popen.pid)
        yield process, report
    finally:
        process.stop()


def test_app_is_served_through_its_url_and_not_at_its_port(
    app: tuple[Process, dict[str, object]],
) -> None:
    _, report = app
    url = str(report["urls"][0])  # type: ignore[index]
    assert echo(host_port_of(url), "/x")["server_port"] == 4173
    assert not port_is_open(4173)


def test_base_path_app_and_root_app_get_two_origins(
    app: tuple[Process, dict[str, object]],
) -> None:
    _, report = app
    root_url, base_url = (str(u) for u in report["urls"])  # type: ignore[attr-defined]
    assert host_port_of(root_url) != host_port_of(base_url)
    assert base_url.endswith("/app")
    assert echo(host_port_of(base_url), "/main.js?x")["path"] == "/app/main.js?x"
    assert echo(host_port_of(root_url), "/main.js?x")["path"] == "/main.js?x"


def test_host_prints_each_registration(app: tuple[Process, dict[str, object]]) -> None:
    process, report = app
    line = process.wait_line("sandbridge: sandbox port 4173 -> ", "stderr")
    assert line.endswith(str(report["urls"][0]))  # type: ignore[index]


def test_exit_status_of_the_command_is_returned(
    backend: str, tmp_path: Path, served: Process | None
) -> None:
    for script, status in (("exit 7", 7), ("true", 0)):
        result = run_to_end(backend, tmp_path, script)
        assert result.returncode == status, result.stderr


def test_command_that_cannot_start_is_127(backend: str, tmp_path: Path, xdg: Path) -> None:
    result = subprocess.run(
        [
            *SANDBRIDGE,
            "run",
            "--backend",
            backend,
            "--workdir",
            str(tmp_path),
            "--",
            "/no/such/program",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 127
    assert "cannot run '/no/such/program'" in result.stderr


@dataclass
class View:
    """One sandbox's answers to what each test below looks at (one run per backend for
    the module: each only looks), by section, and the host dirs the run was given."""

    sections: dict[str, list[str]]
    home: Path
    work: Path
    extra: Path


# Each section's commands; the run prints ``@NAME`` before each, and the HOME, the
# binds and the environment are those of every test below at once.
LOOKS = {
    "contract": (
        'echo "$AGS_WEBVIEW_RELAY_SOCKET"; echo "$AGS_WEBVIEW_RELAY_UPSTREAM_SOCKET";'
        'command -v ags-webview-url; test -x "$HOME/.local/bin/ags-webview-url" && echo home-ok;'
        "test -S /run/ags-webview-relay/relay.sock && echo relay-ok;"
        "test -S /run/ags-webview-relay/upstream.sock && echo shim-ok"
    ),
    "env": 'echo "[$HOST_SECRET][$SHARED][$EXTRA]"',
    "files": (
        "touch made-inside && echo work-rw;"
        "touch /usr/sandbridge-test 2>/dev/null || echo host-ro;"
        "touch /tmp/private && echo tmp-rw;"
        "test -e {home}/secret-key || echo home-private;"
        "touch $HOME/x && echo home-rw;"
        "touch {extra}/w && echo bind-rw;"
        "echo $(cat {extra_ro}/data); touch {extra_ro}/w 2>/dev/null || echo ro-bind-ro;"
        "test -e /dev/null && test ! -e /dev/vda && echo dev-minimal"
    ),
    "net": "cat /proc/net/dev",
    "processes": "ls /proc | grep -c '^[0-9]'",
}


@pytest.fixture(scope="module", params=BACKENDS)
def view(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> View:
    top = tmp_path_factory.mktemp("view")
    xdg = top / "xdg"
    xdg.mkdir(mode=0o700)
    home = top / "home"
    home.mkdir()
    (home / "secret-key").write_text("host only")
    work = top / "work"
    work.mkdir()
    extra, extra_ro = top / "extra", top / "extra_ro"
    extra.mkdir()
    extra_ro.mkdir()
    (extra_ro / "data").write_text("ro")
    paths = {"home": home, "extra": extra, "extra_ro": extra_ro}
    script = "".join(f"echo @{name};{look.format(**paths)};" for name, look in LOOKS.items())
    env = {**os.environ, "XDG_RUNTIME_DIR": str(xdg), "HOME": str(home)}
    result = run_to_end(
        str(request.param),
        work,
        script,
        options=(
            *("--env", "SHARED", "--env", "EXTRA=1"),
            *("--bind", str(extra), "--ro-bind", str(extra_ro)),
        ),
        env={**env, "HOST_SECRET": "s3cret", "SHARED": "yes"},
    )
    assert result.returncode == 0, result.stderr
    # Output before the first section would show as a section "" of its own.
    sections: dict[str, list[str]] = {}
    current = sections.setdefault("", [])
    for line in result.stdout.splitlines():
        if line.startswith("@") and line[1:] in LOOKS:
            current = sections.setdefault(line[1:], [])
        else:
            current.append(line)
    assert not sections.pop(""), result.stdout
    assert list(sections) == list(LOOKS), result.stdout
    return View(sections, home, work, extra)


def test_contract_environment_and_helper(view: View) -> None:
    lines = view.sections["contract"]
    assert lines[:2] == [
        "/run/ags-webview-relay/relay.sock",
        "/run/ags-webview-relay/upstream.sock",
    ]
    assert lines[2] == "/run/sandbridge/bin/ags-webview-url"
    assert lines[3:] == ["home-ok", "relay-ok", "shim-ok"]
    assert not Path("/run/ags-webview-relay").exists()


def test_host_secrets_stay_out_and_env_flag_passes_values(view: View) -> None:
    assert view.sections["env"] == ["[][yes][1]"]


def test_file_system_view(view: View) -> None:
    assert view.sections["files"] == [
        "work-rw",
        "host-ro",
        "tmp-rw",
        "home-private",
        "home-rw",
        "bind-rw",
        "ro",
        "ro-bind-ro",
        "dev-minimal",
    ]
    assert (view.work / "made-inside").exists()
    assert not Path("/tmp/private").exists()
    assert not (view.home / "x").exists()
    assert (view.extra / "w").exists()


def test_sandbox_has_only_loopback(view: View) -> None:
    interfaces = [line.split(":")[0].strip() for line in view.sections["net"][2:]]
    assert interfaces == ["lo"]


def test_sandbox_sees_only_its_own_processes(view: View) -> None:
    [count] = view.sections["processes"]
    assert int(count) < 10


def test_descriptors_whoever_started_the_run_left_open_stay_out_of_the_sandbox(
    backend: str, served: Process | None, tmp_path: Path
) -> None:
    # A descriptor is a capability no mount takes back: a directory's reaches every file
    # under it. uvloop's subprocesses kept what the run inherited (its close_fds is not
    # honoured): a file and a directory the caller left open reached the command.
    secret = tmp_path / "secret"
    secret.write_text("host-secret\n")
    work = tmp_path / "work"
    work.mkdir()
    fds = [os.open(secret, os.O_RDONLY), os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)]
    probe = (
        "import os, sys\n"
        "for fd in map(int, sys.argv[1:]):\n"
        "    for how in (lambda: os.readlink(f'/proc/self/fd/{fd}'), lambda: os.read(fd, 99),\n"
        "                lambda: open(f'/proc/self/fd/{fd}/secret').read()):\n"
        "        try:\n"
        "            print(how())\n"
        "        except OSError as exc:\n"
        "            print(fd, exc.strerror)\n"
        "print('probed')\n"
    )
    command = ["/usr/bin/python3", "-c", probe, *map(str, fds)]
    try:
        result = subprocess.run(
            run_argv(work, *command, options=("--backend", backend)),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            pass_fds=fds,
        )
    finally:
        for fd in fds:
            os.close(fd)
    assert "probed" in result.stdout, result.stderr
    assert "host-secret" not in result.stdout
    assert str(tmp_path) not in result.stdout


@pytest.mark.parametrize(
    ("how", "expected"),
    [("exit", 0), ("fail", 3), ("SIGTERM", 128 + signal.SIGTERM), ("SIGINT", 128 + signal.SIGINT)],
)
def test_session_end_removes_everything(
    backend: str, tmp_path: Path, xdg: Path, how: str, expected: int
) -> None:
    marker = f"sandbridge-daemon-{os.getpid()}-{backend}-{how}"
    go = tmp_path / "go"
    os.mkfifo(go)
    script = (
        f"{PYTHON} {ECHO_APP} --register 4173 --daemon {marker} & read status < {go}; exit $status"
    )
    process = sandboxed(backend, tmp_path, "sh", "-c", script)
    report = ready(process)
    url_port = host_port_of(str(report["urls"][0]))  # type: ignore[index]
    assert echo(url_port)["server_port"] == 4173
    assert processes_with(marker)
    assert sorted(path.name for path in xdg.iterdir()) == [
        f"ags-webview-relay-{process.popen.pid}",
        f"sandbridge-{os.getuid()}",
    ]
    if how.startswith("SIG"):
        assert process.stop(getattr(signal, how)) == expected
    else:
        go.write_text(f"{expected}\n")
        assert process.popen.wait(30) == expected
    assert not port_is_open(url_port)
    _wait_gone(marker)
    assert list(xdg.iterdir()) == []


def test_sigkill_of_sandbridge_kills_the_sandbox_and_next_start_cleans(
    backend: str, tmp_path: Path, xdg: Path
) -> None:
    marker = f"sandbridge-daemon-{os.getpid()}-{backend}-kill"
    process = sandboxed(
        backend, tmp_path, PYTHON, ECHO_APP, "--register", "4173", "--daemon", marker
    )
    report = ready(process)
    url_port = host_port_of(str(report["urls"][0]))  # type: ignore[index]
    process.stop(signal.SIGKILL)
    assert not port_is_open(url_port)
    _wait_gone(marker)
    # The stale runtime and session dirs: nothing could remove them.
    assert len(list(xdg.iterdir())) == 2
    assert run_to_end(backend, tmp_path, "true").returncode == 0
    assert list(xdg.iterdir()) == []


def _wait_gone(marker: str) -> None:
    """Wait, with pidfds, for the processes carrying ``marker`` to exit."""
    import select

    for pid in processes_with(marker):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            ready_fds, _, _ = select.select([fd], [], [], 10)
            assert ready_fds, f"process {pid} ({marker}) outlived its sandbox"
        finally:
            os.close(fd)
    assert processes_with(marker) == []


def test_two_sessions_are_isolated(backend: str, tmp_path: Path, xdg: Path) -> None:
    first = sandboxed(backend, tmp_path, PYTHON, ECHO_APP, "--register", "4173")
    second = sandboxed(backend, tmp_path, PYTHON, ECHO_APP, "--register", "4173")
    try:
        one, two = ready(first), ready(second)
        port_one = host_port_of(str(one["urls"][0]))  # type: ignore[index]
        port_two = host_port_of(str(two["urls"][0]))  # type: ignore[index]
        pid_one = json.loads(request(port_one, path="/pid")[2])["pid"]
        pid_two = json.loads(request(port_two, path="/pid")[2])["pid"]
        assert port_one != port_two
        assert pid_one == one["pid"] and pid_two == two["pid"]
        dirs = sorted(xdg.iterdir())
        # Two runtime dirs and the host's session state (control sockets): none visible.
        assert [d.name.startswith("ags-webview-relay-") for d in dirs] == [True, True, False]
        probe = run_to_end(
            backend,
            tmp_path,
            " ".join(f"test -e {d} && echo visible-{i};" for i, d in enumerate(dirs))
            + "ls /run/ags-webview-relay",
        )
        assert "visible" not in probe.stdout
        # egress.sock: the host's egress gate (net = allow, the default).
        assert probe.stdout.split() == ["egress.sock", "relay.sock", "upstream.sock"]
    finally:
        first.stop()
        second.stop()


def test_unprivileged_user_runs_a_session(backend: str, nobody: Nobody) -> None:
    process = Process(
        [*nobody.run_argv(backend), "--", "/usr/bin/python3", ECHO_APP, "--register", "4173"],
        env=nobody.env,
        cwd=str(nobody.work),
    )
    try:
        report = ready(process)
        assert echo(host_port_of(str(report["urls"][0])))["server_port"] == 4173  # type: ignore[index]
    finally:
        assert process.stop() == 128 + signal.SIGTERM
    assert list(nobody.xdg.iterdir()) == []


@pytest.mark.parametrize("mode", ["standalone", "daemon"])
def test_a_runtime_dir_too_long_for_a_socket_path_is_refused_naming_it(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 80 bytes: the daemon's socket (sandbridge-UID/daemon.sock) still fits in the 107
    # bytes a Unix socket path may have, a session's relay.sock under it does not.
    xdg = tmp_path / ("x" * (79 - len(str(tmp_path))))
    assert len(str(xdg)) == 80
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    work = tmp_path / "work"
    work.mkdir()
    daemon = start_daemon() if mode == "daemon" else None
    try:
        result = run_to_end("bwrap", work, "echo ran")
    finally:
        if daemon is not None:
            daemon.stop()
    assert result.returncode == 2, result.stderr
    assert "ran" not in result.stdout
    assert f"{xdg}/ags-webview-relay-" in result.stderr
    assert "/relay.sock: " in result.stderr
    assert "bytes, longer than the 107 a Unix socket's path may have; set XDG_RUNTIME_DIR " \
        "to a shorter directory" in result.stderr  # fmt: skip
    assert "Traceback" not in result.stderr
