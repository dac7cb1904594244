"""The declared list of ``sandbridge doctor``'s checks, in the order it prints them.

A new part to check (an agent profile's command, its state directories) is one more
:data:`~sandbridge.doctor.finding.Check` here: a function of no arguments that asks this
machine and returns a :class:`~sandbridge.doctor.finding.Finding` with its fix.
"""

from __future__ import annotations

from sandbridge.doctor import agent_checks, host_checks, place_checks
from sandbridge.doctor.finding import Check

CHECKS: tuple[Check, ...] = (
    host_checks.sandbox_backend,
    host_checks.user_namespaces,
    host_checks.front_door,
    host_checks.desktop_browser,
    host_checks.systemd_user_session,
    host_checks.localhost_names,
    place_checks.runtime_dirs,
    place_checks.session_state,
    place_checks.state_dir,
    place_checks.known_projects_list,
)


def all_checks() -> list[Check]:
    """:data:`CHECKS`, then one check per agent profile (the owner's profiles vary)."""
    return [*CHECKS, *agent_checks.profile_checks()]
