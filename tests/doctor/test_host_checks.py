"""The checks of what this machine has, each against the real thing: the backend run,
systemctl asked, the resolver asked (in a sandbox with stock files where they matter)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sandbridge.doctor import host_checks
from sandbridge.doctor.finding import Status
from sandbridge.relay.front import front
from tests.conftest import SANDBRIDGE

# Debian's default hosts and nsswitch.conf (netbase, libc-bin): no name under localhost
# but localhost itself, resolved by files then DNS.
DEBIAN_HOSTS = "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n"
DEBIAN_NSSWITCH = "passwd: files\ngroup: files\nhosts: files dns\n"


def test_the_sandbox_backend_is_found_and_makes_a_user_namespace() -> None:
    backend = host_checks.sandbox_backend()
    assert backend.status is Status.OK, backend
    assert backend.found.split()[0] in {"bwrap", "unshare"}
    namespaces = host_checks.user_namespaces()
    assert namespaces.status is Status.OK, namespaces


def test_no_sandbox_backend_fails_with_how_to_install_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with neither bwrap nor unshare
    finding = host_checks.sandbox_backend()
    assert finding.status is Status.FAIL
    assert finding.found == "neither bubblewrap (bwrap) nor util-linux unshare is installed"
    assert "apt-get install bubblewrap" in finding.fix
    assert host_checks.user_namespaces().status is Status.FAIL


def test_the_front_door_built_here_is_said_to_serve() -> None:
    # (built without a compiler it is a warning: tests/test_install.py)
    assert front.missing() is None
    assert host_checks.front_door().status is Status.OK


def test_without_a_desktop_opens_are_printed_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("BROWSER", "/bin/true")
    finding = host_checks.desktop_browser()
    assert finding.status is Status.WARN
    assert "no desktop session (DISPLAY and WAYLAND_DISPLAY unset)" in finding.found


def test_a_desktop_with_the_browser_command_is_fine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISPLAY", ":7")
    monkeypatch.setenv("BROWSER", "/bin/true --new-window")
    finding = host_checks.desktop_browser()
    assert (finding.status, finding.found) == (Status.OK, "/bin/true on display :7")


def test_a_browser_command_not_found_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISPLAY", ":7")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("BROWSER", raising=False)
    finding = host_checks.desktop_browser()
    assert finding.status is Status.WARN
    assert finding.found.startswith("xdg-open (the browser command) is not found")
    assert "xdg-utils" in finding.fix


def test_an_unparsable_browser_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BROWSER", "firefox 'unclosed")
    finding = host_checks.desktop_browser()
    assert finding.status is Status.WARN
    assert "$BROWSER" in finding.found and "'unclosed" in finding.found


def test_no_systemd_user_session_says_to_start_the_daemon_from_the_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No manager answers here (as on the test machines; on a desktop, not at this path).
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", f"unix:path={tmp_path / 'bus'}")
    finding = host_checks.systemd_user_session()
    assert finding.status is Status.WARN
    assert finding.found.startswith("systemctl --user: ")
    assert "`sandbridge daemon &`" in finding.fix


def _localhost_check(tmp_path: Path, hosts: str) -> dict[str, str]:
    """The ``*.localhost`` check of ``sandbridge doctor --json`` run with ``hosts`` as
    /etc/hosts and Debian's nsswitch.conf, without a network (DNS answers nothing)."""
    (tmp_path / "hosts").write_text(hosts)
    (tmp_path / "nsswitch.conf").write_text(DEBIAN_NSSWITCH)
    bwrap = shutil.which("bwrap")
    assert bwrap is not None, "this test binds stock files with bubblewrap"
    result = subprocess.run(
        [
            bwrap,
            "--dev-bind",
            "/",
            "/",
            "--unshare-net",
            "--ro-bind",
            str(tmp_path / "hosts"),
            "/etc/hosts",
            "--ro-bind",
            str(tmp_path / "nsswitch.conf"),
            "/etc/nsswitch.conf",
            *SANDBRIDGE,
            "doctor",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)},
    )
    checks = json.loads(result.stdout)["checks"]
    [finding] = [check for check in checks if check["name"] == "*.localhost names"]
    return dict(finding)


def test_localhost_names_unresolved_by_stock_debian_are_a_warning_with_the_fix(
    tmp_path: Path,
) -> None:
    finding = _localhost_check(tmp_path, DEBIAN_HOSTS)
    assert finding["status"] == "warn"
    assert finding["found"].startswith("sandbridge-doctor.localhost does not resolve")
    assert "libnss-myhostname" in finding["fix"] and "--url-form ip" in finding["fix"]


def test_localhost_names_resolved_to_loopback_are_fine(tmp_path: Path) -> None:
    hosts = DEBIAN_HOSTS + "127.0.0.1\tsandbridge-doctor.localhost\n"
    finding = _localhost_check(tmp_path, hosts)
    assert (finding["status"], finding["found"]) == ("ok", "resolve to 127.0.0.1")


def test_localhost_names_resolved_elsewhere_are_named(tmp_path: Path) -> None:
    hosts = DEBIAN_HOSTS + "192.0.2.7\tsandbridge-doctor.localhost\n"
    finding = _localhost_check(tmp_path, hosts)
    assert finding["status"] == "warn"
    assert finding["found"].startswith(
        "sandbridge-doctor.localhost resolves to 192.0.2.7, not loopback"
    )
