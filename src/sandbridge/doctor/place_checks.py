"""The checks of where sandbridge keeps things for this user: the runtime dirs' base, the
session state, the known-projects list. They look and never create."""

from __future__ import annotations

import os
from pathlib import Path

from sandbridge.doctor.finding import Finding, Status
from sandbridge.exceptions import SandbridgeError
from sandbridge.places import known_projects, registry
from sandbridge.private_dir import require_private_dir
from sandbridge.protocol.contract import runtime_base


def runtime_dirs() -> Finding:
    """``$XDG_RUNTIME_DIR`` (else ``/tmp``), where each session's runtime dir is made."""
    base = runtime_base()
    if not base.is_dir() or not os.access(base, os.W_OK | os.X_OK):
        return Finding(
            "runtime dirs",
            Status.FAIL,
            f"{base} is not a directory this user can write: no session can start",
            "export XDG_RUNTIME_DIR to a 0700 directory of yours",
        )
    if not os.environ.get("XDG_RUNTIME_DIR"):
        return Finding(
            "runtime dirs",
            Status.WARN,
            f"XDG_RUNTIME_DIR is unset: sessions use {base} (names others cannot guess)",
            "log in through a session that sets it (pam_systemd does), or export "
            "XDG_RUNTIME_DIR to a 0700 directory of yours",
        )
    return Finding("runtime dirs", Status.OK, f"each session's is made in {base}")


def session_state() -> Finding:
    """``sandbridge-<uid>`` in the runtime base: the registry of running sessions (one
    not this user's own sends them to a fallback beside it, which ``ls`` finds too)."""
    return _private(
        "session state",
        registry.state_root(),
        "made at the first session",
        "sessions use a fallback beside it; remove it if it is yours",
    )


def state_dir() -> Finding:
    """``${XDG_STATE_HOME:-~/.local/state}/sandbridge``: the known-projects list."""
    path = known_projects.state_dir()
    return _private(
        "state dir", path, "made at the first `sandbridge run`", f"chmod 700 {path} if yours"
    )


def known_projects_list() -> Finding:
    """The projects whose ``.sandbridge/`` every sandbox hides."""
    path = known_projects.state_dir() / known_projects.FILE
    try:
        known = known_projects.known()
    except OSError as exc:
        return Finding(
            "known projects",
            Status.WARN,
            f"{path} cannot be read ({exc.strerror or exc}): sandboxes hide no other "
            "project's .sandbridge/",
            f"remove {path}; each project's next `sandbridge run` enters it again",
        )
    if not known:
        return Finding("known projects", Status.OK, f"none yet ({path})")
    return Finding("known projects", Status.OK, f"{len(known)} in {path}")


def _private(name: str, path: Path, absent: str, fix: str) -> Finding:
    """``path`` is this user's 0700 directory, or not there yet (``absent``: when it
    will be)."""
    try:
        require_private_dir(path, name, SandbridgeError)
    except FileNotFoundError:
        return Finding(name, Status.OK, f"{path}: not there yet, {absent}")
    except OSError as exc:
        return Finding(name, Status.WARN, f"{path} cannot be inspected ({exc.strerror})", fix)
    except SandbridgeError as exc:
        return Finding(name, Status.WARN, str(exc), fix)
    return Finding(name, Status.OK, str(path))
