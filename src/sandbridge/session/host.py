"""A host relay session: runtime dir, registration server and one listener per app."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from sandbridge import log
from sandbridge.exceptions import RegistrationError
from sandbridge.places.registry import AppRecord, SessionEntry
from sandbridge.places.runtime_dir import RuntimeDir
from sandbridge.protocol.auto_registration import APPS_LIMIT_PREFIX, UnregisterRequest
from sandbridge.protocol.publish_rules import decide, refusal
from sandbridge.protocol.registration import RegisterRequest
from sandbridge.relay.app_listener import App, AppListener
from sandbridge.relay.registration_server import RegistrationServer
from sandbridge.relay.settings import RelaySettings, SessionScope
from sandbridge.relay.upstream import ForwardingMode, UpstreamConnector

OnRegister = Callable[[App], None]


@dataclass
class HostSession:
    """Everything the host runs for one sandbox; :meth:`close` removes all of it."""

    runtime_dir: RuntimeDir
    protocol: ForwardingMode = ForwardingMode.AUTO
    on_register: OnRegister | None = None
    settings: RelaySettings = field(default_factory=RelaySettings)
    listeners: list[AppListener] = field(default_factory=list)
    entry: SessionEntry | None = None
    # Called with an auto-published app whose sandbox socket went away (unregistered).
    on_unregister: OnRegister | None = None
    _registration: RegistrationServer | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Each listener's registration (its optional process and auto fields), by host port.
    _requests: dict[int, RegisterRequest] = field(default_factory=dict)

    @property
    def apps(self) -> list[App]:
        return [self._app(listener) for listener in self.listeners]

    async def start(self) -> None:
        self._scope = SessionScope(self.settings)
        self._connector = UpstreamConnector(self.runtime_dir.upstream_socket, self.protocol)
        self._registration = RegistrationServer(
            self.runtime_dir.relay_socket, self.register, self.unregister
        )
        await self._registration.start()

    async def register(self, request: RegisterRequest) -> App:
        """Give sandbox port ``request.port`` a new host origin."""
        if request.auto and (why := refusal(self.settings.publish_rules, request.port)):
            raise RegistrationError(why)
        async with self._lock:
            if len(self.listeners) >= self.settings.max_apps:
                raise RegistrationError(
                    f"{APPS_LIMIT_PREFIX}{len(self.listeners)} apps; the limit is "
                    f"{self.settings.max_apps}"
                )
            listener = AppListener(request.port, request.base_path, self._connector, self._scope)
            await listener.start()
            self.listeners.append(listener)
            self._requests[listener.host_port] = request
            self._write_entry()
        app = self._app(listener)
        # The URL of a private app carries its one-time token: never log it.
        log.info(
            "app.registered",
            sandbox_port=app.port,
            host_port=app.host_port,
            auto=request.auto,
            process=request.process,
        )
        if self.on_register is not None:
            self.on_register(app)
        return app

    async def unregister(self, request: UnregisterRequest) -> None:
        """Close the auto-published app at ``request.host_port``; refuse any other."""
        async with self._lock:
            listener = next((a for a in self.listeners if a.host_port == request.host_port), None)
            if listener is None:
                raise RegistrationError(f"no app of this session has host port {request.host_port}")
            if not self._requests[listener.host_port].auto:
                raise RegistrationError(
                    f'host port {request.host_port} was not registered with "auto":true; '
                    "only auto-published apps can be unregistered"
                )
            app = self._app(listener)
            self.listeners.remove(listener)
            del self._requests[listener.host_port]
            self._write_entry()
            # Under the lock: a registration that follows cannot get this host port
            # while the old listener still holds it.
            await listener.close()
        log.info("app.unregistered", sandbox_port=app.port, host_port=app.host_port)
        if self.on_unregister is not None:
            self.on_unregister(app)

    def _app(self, listener: AppListener) -> App:
        """The listener's app with what its registration said (process, auto action)."""
        request = self._requests.get(listener.host_port)
        if request is None:
            return listener.app
        action = decide(self.settings.publish_rules, request.port) if request.auto else None
        return dataclasses.replace(listener.app, process=request.process, action=action)

    def _write_entry(self) -> None:
        if self.entry is not None:
            self.entry.set_apps([self._record(listener) for listener in self.listeners])

    def _record(self, listener: AppListener) -> AppRecord:
        # The token-free URL: a private app's token never leaves this process.
        assert listener.origin is not None
        url = listener.origin.url(listener.base_path)
        request = self._requests[listener.host_port]
        return AppRecord(
            listener.port,
            listener.host_port,
            listener.base_path,
            url,
            self.settings.private,
            request.process,
            request.auto,
        )

    async def close(self) -> None:
        """Stop registrations, close every listener and connection, remove the dir."""
        if self._registration is not None:
            await self._registration.close()
        await asyncio.gather(*(listener.close() for listener in self.listeners))
        self.listeners.clear()
        self._requests.clear()
        self.runtime_dir.remove()
