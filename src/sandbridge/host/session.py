"""A host relay session: runtime dir, registration server and one listener per app."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from sandbridge import log
from sandbridge.exceptions import RegistrationError
from sandbridge.host.app_listener import KEEPALIVE_TIMEOUT, App, AppListener, UpstreamConnector
from sandbridge.host.registration import RegistrationServer
from sandbridge.host.runtime_dir import RuntimeDir
from sandbridge.host.upstream import Protocol
from sandbridge.wire.limits import MAX_APPS_PER_SESSION
from sandbridge.wire.registration import RegisterRequest, app_url

OnRegister = Callable[[App], None]


@dataclass
class HostSession:
    """Everything the host runs for one sandbox; :meth:`close` removes all of it."""

    runtime_dir: RuntimeDir
    protocol: Protocol = Protocol.AUTO
    on_register: OnRegister | None = None
    max_apps: int = MAX_APPS_PER_SESSION
    keepalive_timeout: float = KEEPALIVE_TIMEOUT
    listeners: list[AppListener] = field(default_factory=list)
    _registration: RegistrationServer | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def apps(self) -> list[App]:
        return [listener.app for listener in self.listeners]

    async def start(self) -> None:
        self._connector = UpstreamConnector(self.runtime_dir.upstream_socket, self.protocol)
        self._registration = RegistrationServer(self.runtime_dir.relay_socket, self.register)
        await self._registration.start()

    async def register(self, request: RegisterRequest) -> int:
        """Give sandbox port ``request.port`` a new host origin; return its host port."""
        async with self._lock:
            if len(self.listeners) >= self.max_apps:
                raise RegistrationError(
                    f"this session already has {len(self.listeners)} apps; the limit is "
                    f"{self.max_apps}"
                )
            listener = AppListener(
                request.port, request.base_path, self._connector, self.keepalive_timeout
            )
            host_port = await listener.start()
            self.listeners.append(listener)
        log.info(
            "app.registered",
            sandbox_port=request.port,
            url=app_url(host_port, request.base_path),
        )
        if self.on_register is not None:
            self.on_register(listener.app)
        return host_port

    async def close(self) -> None:
        """Stop registrations, close every listener and connection, remove the dir."""
        if self._registration is not None:
            await self._registration.close()
        await asyncio.gather(*(listener.close() for listener in self.listeners))
        self.listeners.clear()
        self.runtime_dir.remove()
