"""One app the relay serves, as the owner is shown it: a sandbox port, its host port and
URL. Kept apart from the listener that serves it (``app_listener.py``), so that a
process that only shows apps (a ``run`` client the daemon serves) does not import the
HTTP data path."""

from __future__ import annotations

from dataclasses import dataclass

from sandbridge.protocol.publish_rules import PublishAction


@dataclass(frozen=True, slots=True)
class App:
    """One registration: host port ``host_port`` forwards to sandbox ``port``."""

    port: int
    base_path: str
    host_port: int
    url: str
    host_name: str = "127.0.0.1"  # what clients must send as Host (with the port)
    process: str | None = None  # auto-publish: who listens, and what the host does with it
    action: PublishAction | None = None
