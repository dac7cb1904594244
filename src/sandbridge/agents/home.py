"""Where an agent's state comes from (``--agent-home``, ``--lockdown``; docs/agents.md).

The choice's names alone: the command line declares them without importing the state's
machinery (``state.py``), which a session imports only when it runs an agent.
"""

from __future__ import annotations

import enum


class AgentHome(enum.Enum):
    """Where the agent's state comes from."""

    KEPT = "kept"
    LOCKDOWN = "lockdown"
    HOST = "host"
