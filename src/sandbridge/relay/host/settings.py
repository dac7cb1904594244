"""The relay's tunable limits, and what the apps of one session share."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from sandbridge.protocol import relay_settings as declared
from sandbridge.protocol.http.origin_policy import AppOrigin, UrlForm
from sandbridge.protocol.publish_rules import PublishRule
from sandbridge.relay.host.budget import Budget


class ForwardingMode(enum.Enum):
    """Which forwarding protocol the session's shim speaks."""

    AUTO = "auto"
    STREAM = "stream"
    V1 = "v1"


@dataclass(frozen=True)
class RelaySettings:
    """Limits of a session's app listeners (command-line flags set them). The limits
    are declared, with their bounds, in protocol/relay_settings.py; a value outside them
    is refused here too (:class:`ValueError`), however the settings were made."""

    keepalive_timeout: float = declared.KEEPALIVE_TIMEOUT.default
    header_timeout: float = declared.HEADER_TIMEOUT.default
    response_timeout: float = declared.RESPONSE_TIMEOUT.default
    max_connections_per_app: int = declared.MAX_CONNECTIONS_PER_APP.default
    max_connections: int = declared.MAX_CONNECTIONS_PER_SESSION.default
    max_apps: int = declared.MAX_APPS.default
    # The front door's pool and the relay's hold this many together (relay/front/front.py).
    pool_size: int = declared.APP_POOL_SIZE.default
    pool_idle_seconds: float = declared.APP_POOL_IDLE.default
    # New connections of public apps served first by the C front door (relay/front/front.py).
    front_door: bool = True
    private: bool = False
    # NAME: each app its own ``<label>.localhost`` site; IP: the contract's 127.0.0.1 form.
    url_form: UrlForm = UrlForm.NAME
    # The owner's auto-publish rules (``publish = ...``): an ``auto`` registration of a
    # port they do not publish is refused; none means the session does not auto-publish.
    publish_rules: tuple[PublishRule, ...] = ()
    # New apps auto-publish may make per window of seconds.
    auto_publish_limit: int = declared.AUTO_PUBLISH_APPS.default
    auto_publish_window: float = declared.AUTO_PUBLISH_WINDOW.default

    def __post_init__(self) -> None:
        for limit in declared.LIMITS:
            limit.check(getattr(self, limit.name), limit.name)


@dataclass
class SessionScope:
    """State the apps of one session share: their origins and the connection budget."""

    settings: RelaySettings = field(default_factory=RelaySettings)
    host_ports: set[int] = field(default_factory=set)
    _origins: frozenset[bytes] = frozenset()
    # Every count of the connection limits (relay/host/budget.py).
    budget: Budget = field(init=False)

    def __post_init__(self) -> None:
        settings = self.settings
        self.budget = Budget(settings.max_connections_per_app, settings.max_connections)

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
