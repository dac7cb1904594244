"""The checks of what this machine has: the sandbox backend and its user namespaces, the
front door, a desktop browser, a systemd user manager, ``*.localhost`` names."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
from pathlib import Path

from sandbridge.doctor.finding import Finding, Status
from sandbridge.exceptions import SandboxError
from sandbridge.places import host_commands
from sandbridge.places.systemd_user import WITHOUT_SYSTEMD, user_manager_missing
from sandbridge.relay.front import front
from sandbridge.relay.host.open_settings import OpenSettings
from sandbridge.sandbox import backend

# The smallest sandbox each backend makes: a user namespace and nothing else to set up.
USERNS_PROBES = {
    "bwrap": ["--unshare-user", "--ro-bind", "/", "/", "true"],
    "unshare": ["--user", "--map-root-user", "true"],
}
# A namespace is made in milliseconds; a probe still running after this is stuck.
PROBE_TIMEOUT = 10.0
# The kernel settings that turn user namespaces off, read to say which one did.
USERNS_SYSCTLS = (
    "user/max_user_namespaces",
    "kernel/unprivileged_userns_clone",
    "kernel/apparmor_restrict_unprivileged_userns",
)
# A name under localhost that no one registers: what an app's URL host looks like.
PROBE_NAME = "sandbridge-doctor.localhost"


def sandbox_backend() -> Finding:
    """bubblewrap, else util-linux unshare: the one thing a session cannot do without."""
    try:
        name = backend.resolve("auto")
    except SandboxError as exc:
        return Finding(
            "sandbox backend",
            Status.FAIL,
            str(exc),
            "install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap; Fedora: dnf "
            "install bubblewrap), or util-linux's unshare and setpriv",
        )
    return Finding("sandbox backend", Status.OK, f"{name} ({host_commands.which(name)})")


def user_namespaces() -> Finding:
    """The backend really makes a user namespace (a kernel or AppArmor may refuse it)."""
    try:
        name = backend.resolve("auto")
    except SandboxError:
        return Finding("user namespaces", Status.FAIL, "not tried: no sandbox backend")
    argv = [host_commands.require(name), *USERNS_PROBES[name]]
    try:
        probe = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        said = f"did not end within {PROBE_TIMEOUT:g}s"
    else:
        if probe.returncode == 0:
            return Finding("user namespaces", Status.OK, f"{name} made one")
        lines = probe.stderr.strip().splitlines()
        said = lines[0] if lines else f"exit status {probe.returncode}"
    return Finding(
        "user namespaces",
        Status.FAIL,
        f"{' '.join(argv)}: {said}{_sysctls()}",
        "allow unprivileged user namespaces: sysctl user.max_user_namespaces=15000 (and "
        "kernel.unprivileged_userns_clone=1 where it exists); on Ubuntu 24.04 and later, "
        "AppArmor's kernel.apparmor_restrict_unprivileged_userns=1 lets only bwrap's "
        "profile (package bubblewrap) make them",
    )


def _sysctls() -> str:
    values = []
    for name in USERNS_SYSCTLS:
        try:
            value = Path("/proc/sys", name).read_text().strip()
        except OSError:
            continue
        values.append(f"{name.replace('/', '.')}={value}")
    return f" ({', '.join(values)})" if values else ""


def front_door() -> Finding:
    """The relay's C accelerator: built, or the Python relay serves everything."""
    reason = front.missing()
    if reason is None:
        return Finding("front door", Status.OK, "built: the C front door serves public apps")
    return Finding(
        "front door",
        Status.WARN,
        f"off ({reason}): the Python relay serves every app, slower to first bytes",
        front.BUILD_FIX,
    )


def desktop_browser() -> Finding:
    """What ``--open browser`` runs, and whether there is a desktop for it."""
    try:
        settings = OpenSettings.for_host(os.environ)
    except ValueError as exc:
        return Finding("desktop browser", Status.WARN, str(exc), "fix $BROWSER or --browser")
    command = settings.browser[0]
    desktop = os.environ.get("WAYLAND_DISPLAY") or os.environ.get("DISPLAY")
    path = host_commands.which(command)
    if path is None:
        return Finding(
            "desktop browser",
            Status.WARN,
            f"{command} (the browser command) is not found: `--open browser` prints URLs",
            "install xdg-utils (for xdg-open), or name your browser in $BROWSER or --browser",
        )
    if not desktop:
        return Finding(
            "desktop browser",
            Status.WARN,
            f"{path}, but no desktop session (DISPLAY and WAYLAND_DISPLAY unset): opens "
            "are printed as URLs to click",
            "run sandbridge from a terminal of your desktop session for `--open browser`",
        )
    return Finding("desktop browser", Status.OK, f"{path} on display {desktop}")


def systemd_user_session() -> Finding:
    """A systemd user manager, which runs the daemon's units (``daemon install``)."""
    why = user_manager_missing(os.environ)
    if why is None:
        return Finding(
            "systemd user session",
            Status.OK,
            "systemctl --user answers: `sandbridge daemon install` can set up the daemon",
        )
    return Finding("systemd user session", Status.WARN, why, WITHOUT_SYSTEMD)


def localhost_names() -> Finding:
    """Whether clients that ask the system's resolver (Python, Node; not browsers or
    curl, which know ``*.localhost`` themselves) find an app's ``<label>.localhost``."""
    try:
        answers = socket.getaddrinfo(PROBE_NAME, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        found = f"{PROBE_NAME} does not resolve ({exc})"
    else:
        addresses = sorted({str(answer[4][0]) for answer in answers})
        if all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses):
            return Finding("*.localhost names", Status.OK, f"resolve to {', '.join(addresses)}")
        found = f"{PROBE_NAME} resolves to {', '.join(addresses)}, not loopback"
    return Finding(
        "*.localhost names",
        Status.WARN,
        f"{found}: browsers and curl open app URLs, other clients need Host (README)",
        "install libnss-myhostname and put `myhostname` on the hosts line of "
        "/etc/nsswitch.conf (or use systemd-resolved), or run with --url-form ip",
    )
