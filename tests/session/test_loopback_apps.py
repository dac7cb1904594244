"""Apps on every loopback address, in real ``sandbridge run`` sessions: whichever of
``127.0.0.1``, ``::1``, ``0.0.0.0`` or ``::`` (dual stack or IPv6 only) an app chose, it
is reachable through its origin by registration (``ags-webview-url``), ``--publish PORT``,
``--publish auto`` and ``sandbridge-open``, with the C front door and without it, and in
the unshare backend too.

Each session starts the echo app on one port per address (tests/apps/echo_app.py ``--at``:
one process serves what would be an app per address), makes them reachable the way the
test names, and waits on a pipe while the test requests each
app's origin on fresh connections (the front door's pool and the Python relay's, with the
host's own sockets in the sandbox's namespace)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import ECHO_APP, LOOPBACK_BINDS, PYTHON, Process, echo, host_port_of, run_argv

# One sandbox port per address, in LOOPBACK_BINDS' order.
PORTS = dict(zip(LOOPBACK_BINDS, range(9101, 9101 + len(LOOPBACK_BINDS)), strict=True))
# Fresh browser connections per app: the first opens an app connection, later ones may
# take a parked one (the front door's pool, or the relay's).
CONNECTIONS = 3


def _at(name: str) -> str:
    """echo_app.py's ``--at`` for the address of ``name`` (LOOPBACK_BINDS' flags)."""
    flags = LOOPBACK_BINDS[name]
    address = flags[flags.index("--bind") + 1]
    return f"--at {PORTS[name]}@{address}{'/v6only' if '--v6only' in flags else ''}"


def _apps_script() -> str:
    """Start the apps and return once each listens (the READY line read)."""
    ats = " ".join(_at(name) for name in PORTS)
    return f"mkfifo /tmp/ready\n{PYTHON} {ECHO_APP} {ats} > /tmp/ready &\nread ready < /tmp/ready"


# How each way makes the apps reachable: the command run once they listen (``{port}``
# each), and the options of the run.
WAYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ags-webview-url": ("ags-webview-url {port}", ()),
    "--publish PORT": ("", tuple(f"--publish={port}" for port in PORTS.values())),
    "--publish auto": ("", ("--publish", "auto")),
    "sandbridge-open": ("sandbridge-open http://localhost:{port}/opened", ("--open", "print")),
}


def _published(process: Process, port: int) -> str:
    """The URL the host printed for ``port`` (``sandbridge: sandbox port P ... -> URL``)."""
    line = process.wait_line(f"sandbridge: sandbox port {port}", "stderr", 60)
    return line.rsplit(" ", 1)[1]


# The relay's two paths for a new connection (the C front door first, or the Python relay
# alone), and the other sandbox backend (bwrap is the default where it runs).
SETUPS: dict[str, tuple[str, ...]] = {
    "front door": (),
    "no front door": ("--no-front-door",),
    "unshare backend": ("--backend", "unshare"),
}


@pytest.mark.parametrize("setup", list(SETUPS))
@pytest.mark.parametrize("way", list(WAYS))
def test_an_app_on_any_loopback_address_is_served_through_its_origin(
    way: str, setup: str, tmp_path: Path, xdg: Path
) -> None:
    command, options = WAYS[way]
    go = tmp_path / "go"
    os.mkfifo(go)
    each = "\n".join(command.format(port=port) for port in PORTS.values()) if command else ""
    script = "\n".join(part for part in (_apps_script(), each, f"read x < {go}") if part)
    process = Process(run_argv(tmp_path, "sh", "-c", script, options=(*options, *SETUPS[setup])))
    try:
        for name, port in PORTS.items():
            url = _published(process, port)
            if way == "sandbridge-open":
                opened = process.wait_line(f"sandbridge: the sandbox opens {url}", "stderr")
                assert opened.endswith("/opened"), opened
            for number in range(CONNECTIONS):
                report = echo(host_port_of(url), f"/{number}")
                assert (report["path"], report["server_port"]) == (f"/{number}", port), name
    finally:
        if process.popen.poll() is None:
            go.write_text("done\n")
        status = process.popen.wait(60)
    assert status == 0, process.drain("stderr")
