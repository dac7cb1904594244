"""The allow mode's network namespace set-up, on the host side of the sandbox."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import PYTHON
from tests.sandbox.test_unshare import run_in_planted_workdir

# Whether loopback carries a connection, the gate address is on it, and the first
# unprivileged port.
SHOW_LOOPBACK = """
import socket
with socket.create_server(("127.0.0.1", 0)) as server:
    socket.create_connection(server.getsockname(), timeout=5).close()
print("up")
with socket.socket() as probe:
    probe.bind(("100.64.0.1", 0))
    print(probe.getsockname()[0])
print(open("/proc/sys/net/ipv4/ip_unprivileged_port_start").read().strip())
"""


def test_modules_in_the_working_directory_are_not_the_net_inits(tmp_path: Path, xdg: Path) -> None:
    # net_init runs on the host, in the run's working directory (it did import the
    # workdir's modules before -P).
    assert run_in_planted_workdir(tmp_path, "--backend", "bwrap", "--net", "allow") == []


def _net_init(gate: str, *command: str) -> subprocess.CompletedProcess[str]:
    """``net_init GATE -- COMMAND`` as ``allow`` mode starts it: root of a fresh user and
    network namespace."""
    net_init = [PYTHON, "-P", "-m", "sandbridge.sandbox.net_init", gate, "--", *command]
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--net", "--", *net_init],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_gate_address_is_on_loopback_and_loopback_is_up() -> None:
    shown = _net_init("100.64.0.1", PYTHON, "-c", SHOW_LOOPBACK)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == ["up", "100.64.0.1", "0"]


@pytest.mark.parametrize(
    "gate", ["100.64.0", "100.64.0.1.2", "::1", "gate", "1e2.0.0.1", "100.64.0.\udcff"]
)
def test_a_gate_that_is_not_an_ipv4_address_is_refused_by_name(gate: str) -> None:
    refused = _net_init(gate, "true")
    assert refused.returncode == 126
    assert refused.stderr == (
        "sandbridge: cannot set up the sandbox network: "
        f"[Errno 22] the gate address {gate!r} is not a dotted-quad IPv4 address\n"
    )


def test_net_init_imports_only_what_it_uses() -> None:
    """It starts with every ``allow``-mode session: not the sandbox's own set-up, nor
    ``ipaddress``."""
    listed = subprocess.run(
        [PYTHON, "-P", "-c", "import sys, sandbridge.sandbox.net_init; print(*sys.modules)"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.split()
    assert "sandbridge.sandbox.unshare_init" not in listed
    assert "ipaddress" not in listed
