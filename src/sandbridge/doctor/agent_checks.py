"""The checks of the agent profiles (``sandbridge run --agent``, docs/agents.md): one per
profile, saying whether a sandbox finds its command and whether its kept state is usable.
They look and never create."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sandbridge.agents import catalogue
from sandbridge.agents.command_lookup import look_up
from sandbridge.agents.profile import AgentProfile
from sandbridge.agents.state import agents_root
from sandbridge.doctor.finding import Check, Finding, Status
from sandbridge.exceptions import AgentError


def profile_checks() -> list[Check]:
    """One check per profile; a profile that cannot be read is one warning naming it."""
    try:
        profiles = catalogue.load_all()
    except AgentError as exc:
        failed = Finding("agent profiles", Status.WARN, str(exc), "fix or remove that profile file")
        return [lambda: failed]
    return [_check_of(profile) for profile in profiles.values()]


def _check_of(profile: AgentProfile) -> Check:
    """The check of one profile, named after it (a check that raises is reported by its
    name: doctor/finding.py)."""

    def check() -> Finding:
        return agent_profile(profile)

    check.__name__ = f"agent_{profile.name}"
    return check


def agent_profile(profile: AgentProfile) -> Finding:
    """Whether ``profile``'s command is found inside a sandbox, and its state usable."""
    name = f"agent {profile.name}"
    home = os.environ.get("HOME")
    lookup = look_up(profile, os.environ.get("PATH"), Path(home) if home else None)
    state = agents_root() / profile.name
    try:
        info = state.lstat()
    except FileNotFoundError:
        info = None
    if info is not None and (
        not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077
    ):
        return Finding(
            name,
            Status.WARN,
            f"its state dir {state} is not a 0700 directory of yours: --agent "
            f"{profile.name} refuses it",
            f"chmod 700 {state} if it is yours, else remove it",
        )
    kept = "no state kept yet" if info is None else f"state in {state}"
    if lookup.path is None:
        return Finding(
            name,
            Status.OK,
            f"not installed ({lookup.program} is not on PATH); {kept}",
        )
    if lookup.hidden_because is not None:
        return Finding(
            name,
            Status.WARN,
            f"{lookup.path} runs here but not in a sandbox: {lookup.hidden_because}",
            f"install {lookup.program} outside your home (system-wide), or give the "
            f"profile's command its full path and --ro-bind its directory",
        )
    return Finding(name, Status.OK, f"{lookup.path}; {kept}")
