"""Whether this user has a systemd user manager, which runs the daemon's units.

A laptop's desktop login has one; a container, a machine reached over ssh without
lingering, or a distribution without systemd has none, and ``systemctl --user`` there
fails with "Failed to connect to bus". :func:`user_manager_missing` asks
``systemctl --user`` itself (found as :mod:`.host_commands` finds every host command),
so what it says is what ``sandbridge daemon install``'s next step would meet.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping

from sandbridge.places import host_commands

# systemctl answers at once when the manager runs or its bus is missing; a manager that
# hangs longer than this is as good as none for an install.
SYSTEMCTL_TIMEOUT = 10.0
# What to run when no systemd starts the daemon (README, "The daemon"): a second daemon
# finds the first one's lock and leaves, so the line is safe in a login script.
WITHOUT_SYSTEMD = (
    "start the daemon from your shell instead: `sandbridge daemon &` now, and the line "
    "`(sandbridge daemon >/dev/null 2>&1 &)` in ~/.profile for the next logins; "
    "`sandbridge run` works without a daemon too"
)


def user_manager_missing(environ: Mapping[str, str]) -> str | None:
    """Why ``systemctl --user`` cannot reach this user's manager in ``environ`` (one
    line), or ``None`` when it can."""
    systemctl = host_commands.which("systemctl")
    if systemctl is None:
        return "systemctl is not installed (no systemd on this machine)"
    try:
        answer = subprocess.run(
            [systemctl, "--user", "show-environment"],
            env=dict(environ),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=SYSTEMCTL_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"systemctl --user did not answer within {SYSTEMCTL_TIMEOUT:g}s"
    except OSError as exc:
        return f"systemctl --user could not run: {exc.strerror}"
    if answer.returncode == 0:
        return None
    said = answer.stderr.strip().splitlines()
    return f"systemctl --user: {said[0] if said else f'exit status {answer.returncode}'}"
