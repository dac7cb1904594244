"""Whether an agent's command would be found inside a sandbox, asked on the host.

The sandbox sees the host's file system read-only, all but the owner's home, ``/tmp`` and
``/run`` (private there) and sandbridge's own dirs; its ``PATH`` is the owner's. So a
command found on the owner's ``PATH`` is found inside too, unless it lies under one of
those private places: an agent installed in ``~/.local/bin`` or ``~/.npm-global`` runs on
the host but not in the sandbox, which is the first thing to tell its owner.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from sandbridge.agents.profile import AgentProfile

# Covered by a private tmpfs in every sandbox (sandbox/host_paths.py's PRIVATE_TOPS).
PRIVATE_TOPS = (Path("/tmp"), Path("/run"))


@dataclass(frozen=True, slots=True)
class CommandLookup:
    """Where the profile's command was found on the host (None: nowhere on ``PATH``),
    and why the sandbox would not see it there (None: it would)."""

    program: str
    path: Path | None
    hidden_because: str | None = None

    @property
    def found_inside(self) -> bool:
        """Whether the sandbox finds the command."""
        return self.path is not None and self.hidden_because is None


def look_up(profile: AgentProfile, path: str | None, home: Path | None) -> CommandLookup:
    """The profile's command on ``path`` (a ``PATH`` value), judged for a sandbox whose
    private home is ``home``."""
    program = profile.command[0]
    found = shutil.which(program, path=path or os.defpath)
    if found is None:
        return CommandLookup(program, None)
    real = Path(found).resolve()
    for top in [*([home] if home is not None else []), *PRIVATE_TOPS]:
        if real.is_relative_to(top):
            return CommandLookup(
                program,
                Path(found),
                f"{real} is under {top}, which the sandbox has private (empty)",
            )
    return CommandLookup(program, Path(found))
