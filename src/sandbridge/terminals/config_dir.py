"""The owner's sandbridge configuration directory, where the owner key and the
requesters file live (:mod:`sandbridge.terminals.keys`).

Apart from the keys, so that a process that needs only the path (``sandbridge run``,
which keeps it out of every sandbox: ``sandbox/host_paths.py``) does not load libsodium.
"""

from __future__ import annotations

import os
from pathlib import Path


def config_dir() -> Path:
    """``${XDG_CONFIG_HOME:-~/.config}/sandbridge``."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "sandbridge"
