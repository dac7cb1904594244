"""The daemon's side of a thin client's run: what it checks before the run builder gets
the client, and the builder's life beside the daemon's."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from benchmarks.proc import children
from sandbridge.daemon.builder import package_identity
from sandbridge.protocol import daemon_wire
from tests.conftest import Process, start_daemon
from tests.daemon.test_server import ask, wait_until


def request(**changes: object) -> bytes:
    run: dict[str, object] = {
        "argv": ["run", "--", "true"],
        "cwd": "/",
        "cwd_id": [os.stat("/").st_dev, os.stat("/").st_ino],
        "env": {},
        "umask": 0o22,
        "python": "/usr/bin/python3 in /usr",
        "package": package_identity(),
    }
    return daemon_wire.run_request({**run, **changes})


def test_a_client_of_another_install_is_left_to_the_full_command(
    daemon: Process, xdg: Path
) -> None:
    answer = ask(xdg, request(python="/elsewhere/python in /elsewhere"), [0, 1, 2])
    assert answer == {"fallback": "the client is not of the daemon's install"}


def test_a_run_request_without_its_three_descriptors_is_refused(daemon: Process, xdg: Path) -> None:
    answer = ask(xdg, request(), [0])
    assert answer == {"error": "a run request carries 3 descriptors, not 1"}


def test_a_malformed_run_request_is_refused_by_its_field(daemon: Process, xdg: Path) -> None:
    assert ask(xdg, request(argv="run true"), [0, 1, 2]) == {
        "error": "a run request's 'argv' is a list of strings"
    }
    assert ask(xdg, request(umask=0o1000), [0, 1, 2]) == {
        "error": "a run request's 'umask' is a number from 0 to 0o777"
    }
    assert ask(xdg, request(env={"A": 1}), [0, 1, 2]) == {
        "error": "a run request's 'env' maps names to strings"
    }


def test_the_builder_ends_with_the_daemon(xdg: Path) -> None:
    daemon = start_daemon()
    try:
        (builder,) = children(daemon.popen.pid)
        cmdline = Path(f"/proc/{builder}/cmdline")
        wait_until(lambda: "sandbridge.cli.run_builder" in cmdline.read_text())  # exec'd
    finally:
        daemon.stop(signal.SIGTERM)
    wait_until(lambda: not Path(f"/proc/{builder}").exists())


def test_the_builder_ends_when_the_daemon_is_killed(xdg: Path) -> None:
    daemon = start_daemon()
    try:
        (builder,) = children(daemon.popen.pid)
    finally:
        daemon.stop(signal.SIGKILL)
    wait_until(lambda: not Path(f"/proc/{builder}").exists() or _zombie(builder))


def _zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")


def test_what_the_builder_could_not_take_is_refused_naming_it(daemon: Process, xdg: Path) -> None:
    # Nothing a real client sends (its argv, environment and cwd cannot hold these), so
    # a confused client's: refused by the daemon, never a traceback in the builder.
    ours = daemon_wire.python_identity(sys.executable, sys.prefix)
    refusals: dict[str, dict[str, object]] = {
        "a run request's 'env' name 'A=B' is empty or holds '=' or NUL": dict(env={"A=B": "x"}),
        "a run request's 'env' name '' is empty or holds '=' or NUL": dict(env={"": "x"}),
        "a run request's 'env' value of 'A' holds NUL": dict(env={"A": "x\0y"}),
        "a run request's 'argv' word 'tr\\x00ue' holds NUL": dict(argv=["run", "tr\0ue"]),
        "a run request's 'cwd' 'work' is not an absolute path without NUL": dict(cwd="work"),
        "a run request's 'cwd' '/tm\\x00p' is not an absolute path without NUL": dict(cwd="/tm\0p"),
    }
    # A lone surrogate (JSON's "\\ud800") is no byte string: os.chdir, os.environ and exec
    # raised UnicodeEncodeError in the builder's child, a traceback on the client's terminal.
    # (U+DC80 to U+DCFF are the undecodable bytes of a real argv or environment: taken.)
    refusals |= {
        "a run request's 'env' value of 'A' is no byte string (a lone surrogate)": dict(
            env={"A": "x\ud800"}
        ),
        "a run request's 'env' name '\\udc00' is no byte string (a lone surrogate)": dict(
            env={"\udc00": "x"}
        ),
        "a run request's 'argv' word '\\udbff' is no byte string (a lone surrogate)": dict(
            argv=["run", "\udbff"]
        ),
        "a run request's 'cwd' '/\\ud800' is no byte string (a lone surrogate)": dict(
            cwd="/\ud800"
        ),
    }
    refusals["a run request's 'cwd_id' is a device and an inode number"] = dict(cwd_id=[1])
    for error, run in refusals.items():
        assert ask(xdg, request(python=ours, **run), [0, 1, 2]) == {"error": error}
