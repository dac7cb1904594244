"""``sandbridge agents``: the agent profiles, whether each one's command is found (in a
sandbox, which does not see the owner's home), and where its state lives for the project
of the current directory (docs/agents.md)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from sandbridge.agents import catalogue
from sandbridge.agents.command_lookup import look_up
from sandbridge.agents.state import kept_dir
from sandbridge.sandbox.project import project_root


def add_agents(agents: argparse.ArgumentParser) -> None:
    """``sandbridge agents``'s arguments."""
    agents.description = (
        "List the agent profiles (shipped, and yours in "
        "${XDG_CONFIG_HOME:-~/.config}/sandbridge/agents), whether each agent's command "
        "is found inside a sandbox and where its state is kept for this directory's project."
    )
    agents.add_argument("--json", action="store_true", help="print JSON for scripts")
    agents.set_defaults(func=cmd_agents)


def rows(root: Path) -> list[dict[str, Any]]:
    """One row per profile, for the project at ``root``."""
    home = os.environ.get("HOME")
    found = []
    for name, profile in catalogue.load_all().items():
        lookup = look_up(profile, os.environ.get("PATH"), Path(home) if home else None)
        state = kept_dir(profile, root)
        found.append(
            {
                "name": name,
                "description": profile.description,
                "command": list(profile.command),
                "found": None if lookup.path is None else str(lookup.path),
                "found_inside": lookup.found_inside,
                "hidden_because": lookup.hidden_because,
                "hosts": list(profile.hosts),
                "state_paths": [str(path) for path in profile.state_paths],
                "state": str(state),
                "state_exists": state.is_dir(),
                "credentials": list(profile.credentials),
                "profile": str(profile.source),
            }
        )
    return found


def cmd_agents(args: argparse.Namespace) -> int:
    table = rows(project_root(Path.cwd()))
    if args.json:
        print(json.dumps(table, indent=2))
        return 0
    width = max(len(row["name"]) for row in table)
    for row in table:
        if row["found"] is None:
            command = f"{row['command'][0]}: not found on PATH"
        elif row["hidden_because"] is not None:
            command = f"{row['found']}: not seen inside ({row['hidden_because']})"
        else:
            command = row["found"]
        kept = "kept" if row["state_exists"] else "none yet"
        print(f"{row['name']:<{width}}  {row['description']}")
        print(f"{'':<{width}}  command  {command}")
        print(f"{'':<{width}}  state    {row['state']} ({kept})")
        print(f"{'':<{width}}  profile  {row['profile']}")
    return 0
