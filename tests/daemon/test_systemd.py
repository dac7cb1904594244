"""The shipped systemd units, and the daemon taking its socket from systemd."""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PYTHON, SANDBRIDGE, Process, run_argv

# What systemd does between fork and exec for a socket-activated service: the listening
# socket becomes descriptor 3, LISTEN_FDS=1 and LISTEN_PID=<the service's own pid>.
AS_SYSTEMD = """
import os, sys
os.dup2(int(sys.argv[1]), 3)
os.environ.update(LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
os.execv(sys.executable, [sys.executable, "-m", "sandbridge.cli", "daemon"])
"""


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


@pytest.fixture
def installed(tmp_path: Path) -> tuple[Path, str]:
    # The test machines have no systemd user session (the test below runs that path).
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    result = subprocess.run(
        [*SANDBRIDGE, "daemon", "install", "--no-session-check"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env=env,
    )
    return tmp_path / "config" / "systemd" / "user", result.stdout


def test_install_writes_both_units_and_says_how_to_enable_them(
    installed: tuple[Path, str],
) -> None:
    directory, output = installed
    names = sorted(p.name for p in directory.iterdir())
    assert names == ["sandbridge.service", "sandbridge.socket"]
    assert "systemctl --user enable --now sandbridge.socket" in output


def test_install_without_a_systemd_user_session_says_what_to_run_instead(
    tmp_path: Path,
) -> None:
    # No user manager answers for this environment: no runtime dir, no session bus (the
    # test machines have none at all; a laptop's would be another XDG_RUNTIME_DIR).
    empty = tmp_path / "xdg"
    empty.mkdir(mode=0o700)
    config = tmp_path / "config"
    env = {
        **os.environ,
        "XDG_CONFIG_HOME": str(config),
        "XDG_RUNTIME_DIR": str(empty),
        "DBUS_SESSION_BUS_ADDRESS": f"unix:path={empty / 'bus'}",
    }
    result = subprocess.run(
        [*SANDBRIDGE, "daemon", "install"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env=env,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("sandbridge: no systemd user session (systemctl --user")
    assert "`sandbridge daemon &`" in line and "~/.profile" in line
    assert not config.exists(), "units written where no systemd runs them"


def test_socket_unit_listens_on_the_daemon_socket_privately(installed: tuple[Path, str]) -> None:
    socket_unit = unit(installed[0] / "sandbridge.socket")
    assert socket_unit["Socket"]["ListenSequentialPacket"] == "%t/sandbridge-%U/daemon.sock"
    assert socket_unit["Socket"]["SocketMode"] == "0600"
    assert socket_unit["Socket"]["DirectoryMode"] == "0700"
    assert socket_unit["Install"]["WantedBy"] == "sockets.target"


def test_service_runs_this_sandbridge_daemon(installed: tuple[Path, str]) -> None:
    service = unit(installed[0] / "sandbridge.service")
    command = shlex.split(service["Service"]["ExecStart"])
    assert command == [PYTHON, "-P", "-m", "sandbridge.cli", "daemon"]
    assert service["Unit"]["Requires"] == "sandbridge.socket"


def test_the_service_never_runs_a_module_from_its_working_directory(
    installed: tuple[Path, str], tmp_path: Path
) -> None:
    # systemd --user starts a service in the user's home directory, which a sandbox whose
    # workdir it is can write; `python -m` put that directory first on the module path,
    # so a `uvloop.py` left there ran as the daemon, outside every sandbox, at its next start.
    command = shlex.split(unit(installed[0] / "sandbridge.service")["Service"]["ExecStart"])
    home = tmp_path / "home"
    home.mkdir()
    ran = tmp_path / "ran"
    (home / "uvloop.py").write_text(f"open({str(ran)!r}, 'w').close()\n")
    result = subprocess.run(
        [*command, "--help"], cwd=home, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert not ran.exists(), "the daemon imported a module from its working directory"


def test_systemd_accepts_the_units(installed: tuple[Path, str]) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:  # the key checks above still run
        return
    directory = installed[0]
    result = subprocess.run(
        [analyze, "verify", "sandbridge.socket", "sandbridge.service"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def prebound(xdg: Path, kind: int = socket.SOCK_SEQPACKET) -> socket.socket:
    """The daemon socket as systemd's socket unit binds it."""
    root = xdg / f"sandbridge-{os.getuid()}"
    root.mkdir(mode=0o700)
    sock = socket.socket(socket.AF_UNIX, kind)
    sock.bind(str(root / "daemon.sock"))
    sock.listen()
    return sock


def test_daemon_serves_a_run_on_the_socket_systemd_passes(xdg: Path, tmp_path: Path) -> None:
    with prebound(xdg) as sock:
        daemon = Process([PYTHON, "-c", AS_SYSTEMD, str(sock.fileno())], pass_fds=[sock.fileno()])
    try:
        assert "the socket from systemd" in daemon.wait_line("sandbridge: daemon ", "stderr")
        result = subprocess.run(
            run_argv(tmp_path, "true"), capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stderr
        daemon.wait_line("sandbridge: daemon.session ", "stderr")
    finally:
        daemon.stop()
    # The socket is systemd's: the daemon leaves it in place for the next start.
    assert (xdg / f"sandbridge-{os.getuid()}" / "daemon.sock").exists()


def test_daemon_refuses_a_socket_of_the_wrong_kind(xdg: Path) -> None:
    with prebound(xdg, socket.SOCK_STREAM) as sock:
        daemon = Process([PYTHON, "-c", AS_SYSTEMD, str(sock.fileno())], pass_fds=[sock.fileno()])
    assert daemon.popen.wait(30) == 2
    assert "is not a listening Unix SOCK_SEQPACKET socket" in daemon.drain("stderr")
