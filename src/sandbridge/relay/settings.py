"""The relay's tunable limits, and what the apps of one session share."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from sandbridge.protocol.http.origin_policy import AppOrigin, UrlForm
from sandbridge.protocol.limits import (
    AUTO_PUBLISH_WINDOW,
    MAX_APPS_PER_SESSION,
    MAX_AUTO_APPS_PER_WINDOW,
)
from sandbridge.protocol.publish_rules import PublishRule


class ForwardingMode(enum.Enum):
    """Which forwarding protocol the session's shim speaks."""

    AUTO = "auto"
    STREAM = "stream"
    V1 = "v1"


# An idle keep-alive connection is closed after this long; browsers reconnect silently.
KEEPALIVE_TIMEOUT = 75.0
# Once a request has begun, its head must be complete within this long (slowloris).
HEADER_TIMEOUT = 15.0
# After the request is sent, the app has this long (without upload progress) to start
# its response; long-polls of a few minutes still fit. Streams that started are never cut.
RESPONSE_TIMEOUT = 300.0
# Open browser connections per app: hundreds of WebSockets fit with room to spare.
MAX_CONNECTIONS_PER_APP = 1024
# Open browser connections per session: each costs two descriptors in this process.
MAX_CONNECTIONS_PER_SESSION = 4096
# App connections left idle by finished browser connections, kept per app for the next
# (relay/app_pool.py): how many, and how long. Shorter than the keep-alive timeouts of
# common app servers (Node and uvicorn: 5 s), so the app rarely closes one first.
POOL_SIZE = 8
POOL_IDLE_SECONDS = 2.0
# The most a session may ask for: the C front door's pool holds up to as many (its MAX_POOL,
# fixed in C; tests/relay/test_front_translation.py checks the two agree), and a larger
# --app-pool-size is refused rather than cut to it behind the user's back.
MAX_POOL_SIZE = 64


@dataclass(frozen=True)
class RelaySettings:
    """Limits of a session's app listeners (command-line flags set them)."""

    keepalive_timeout: float = KEEPALIVE_TIMEOUT
    header_timeout: float = HEADER_TIMEOUT
    response_timeout: float = RESPONSE_TIMEOUT
    max_connections_per_app: int = MAX_CONNECTIONS_PER_APP
    max_connections: int = MAX_CONNECTIONS_PER_SESSION
    max_apps: int = MAX_APPS_PER_SESSION
    pool_size: int = POOL_SIZE
    pool_idle_seconds: float = POOL_IDLE_SECONDS
    # New connections of public apps served first by the C front door (relay/front.py).
    front_door: bool = True
    private: bool = False
    # NAME: each app its own ``<label>.localhost`` site; IP: the contract's 127.0.0.1 form.
    url_form: UrlForm = UrlForm.NAME
    # The owner's auto-publish rules (``publish = ...``): an ``auto`` registration of a
    # port they do not publish is refused; none means the session does not auto-publish.
    publish_rules: tuple[PublishRule, ...] = ()
    # New apps auto-publish may make per window of seconds (protocol/limits.py).
    auto_publish_limit: int = MAX_AUTO_APPS_PER_WINDOW
    auto_publish_window: float = AUTO_PUBLISH_WINDOW


@dataclass
class SessionScope:
    """State the apps of one session share: their origins and the connection budget."""

    settings: RelaySettings = field(default_factory=RelaySettings)
    host_ports: set[int] = field(default_factory=set)
    connections: int = 0
    _origins: frozenset[bytes] = frozenset()

    def add_app(self, origin: AppOrigin) -> None:
        self.host_ports.add(origin.host_port)
        self._origins = self._origins | origin.origins

    def remove_app(self, origin: AppOrigin) -> None:
        """An app that is gone: its origins no longer count as the session's."""
        self.host_ports.discard(origin.host_port)
        self._origins = self._origins - origin.origins

    @property
    def origins(self) -> frozenset[bytes]:
        """The origins allowed to send upgrades and unsafe requests to any of these apps."""
        return self._origins
