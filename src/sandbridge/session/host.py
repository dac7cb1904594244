"""A host relay session: runtime dir, registration server and one listener per app."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandbridge import log
from sandbridge.exceptions import RegistrationError
from sandbridge.places.registry import AppRecord, SessionEntry
from sandbridge.places.runtime_dir import RuntimeDir
from sandbridge.protocol.auto_registration import UnregisterRequest, validate_process_name
from sandbridge.protocol.http.origin_policy import LOCALHOST_DOMAIN, AppOrigin, UrlForm, is_label
from sandbridge.protocol.http.private_access import TOKEN_PARAM
from sandbridge.protocol.limits import MAX_SNAPSHOTS_PER_SESSION, WindowLimit
from sandbridge.protocol.open_request import ExternalTarget, HtmlTarget, LocalTarget, OpenTarget
from sandbridge.protocol.port import validate_port
from sandbridge.protocol.publish_rules import PublishAction, decide, refusal
from sandbridge.protocol.registration import RegisterRequest, normalize_base_path
from sandbridge.protocol.sandbox_requests import APPS_LIMIT_PREFIX, AUTO_RATE_PREFIX
from sandbridge.relay.host.app import App
from sandbridge.relay.host.host_opener import HostOpener
from sandbridge.relay.host.owned_upstream import PendingOwnedUpstream
from sandbridge.relay.host.registration_server import ReadHtml, RegistrationServer, no_html
from sandbridge.relay.host.settings import ForwardingMode, RelaySettings, SessionScope
from sandbridge.relay.host.snapshot import Snapshot
from sandbridge.relay.host.upstream import UpstreamConnector

if TYPE_CHECKING:
    from sandbridge.relay.listener.app_listener import AppListener

OnRegister = Callable[[App], None]


@dataclass
class HostSession:
    """Everything the host runs for one sandbox; :meth:`close` removes all of it."""

    runtime_dir: RuntimeDir
    protocol: ForwardingMode = ForwardingMode.AUTO
    on_register: OnRegister | None = None
    settings: RelaySettings = field(default_factory=RelaySettings)
    listeners: list[AppListener] = field(default_factory=list)
    # HTML snapshots served for ``sandbridge-open --html`` (relay/host/snapshot.py).
    snapshots: list[Snapshot] = field(default_factory=list)
    entry: SessionEntry | None = None
    # Called with an auto-published app whose sandbox socket went away (unregistered).
    on_unregister: OnRegister | None = None
    # Serves the sandbox's open requests (docs/open.md); without it they are refused.
    opener: HostOpener | None = None
    # A sandbox sandbridge runs itself: app connections the host owns alone
    # (relay/host/owned_upstream.py) instead of the shim's handoff.
    owned: PendingOwnedUpstream | None = None
    _registration: RegistrationServer | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Each listener's registration (its optional process and auto fields), by host port.
    _requests: dict[int, RegisterRequest] = field(default_factory=dict)
    # Host ports of apps registered without "auto" that auto-publish published too (it
    # was given the same app): its unregister drops only that, the app stays.
    _also_auto: set[int] = field(default_factory=set)
    # New apps auto-publish made lately (from the settings).
    _new_auto: WindowLimit = field(init=False)

    def __post_init__(self) -> None:
        self._new_auto = WindowLimit(
            self.settings.auto_publish_limit, self.settings.auto_publish_window
        )

    @property
    def apps(self) -> list[App]:
        return [self._app(listener) for listener in self.listeners]

    async def start(self) -> None:
        self._scope = SessionScope(self.settings)
        self._connector = UpstreamConnector(
            self.runtime_dir.upstream_socket, self.protocol, self.owned
        )
        self._registration = RegistrationServer(
            self.runtime_dir.relay_socket,
            self.register,
            self.unregister,
            None if self.opener is None else self.open_url,
        )
        await self._registration.start()
        if self.opener is not None:
            # A login's callback reaches the sandbox's port as an app's request does.
            self.opener.callbacks.open_sandbox = self._connector.open

    async def register(self, request: RegisterRequest) -> App:
        """Give sandbox port ``request.port`` a new host origin, or, where auto-publish
        and an explicit registration meet on one port, the app the other one made: one
        origin per port, in whichever order they come (docs/network.md#auto-publish)."""
        if request.auto and (why := refusal(self.settings.publish_rules, request.port)):
            raise RegistrationError(why)
        async with self._lock:
            shared = self._shared(request)
            if shared is None:
                listener = await self._add_listener(request)
        if shared is not None:
            return shared
        return self._announce(listener)

    def _shared(self, request: RegisterRequest) -> App | None:
        """The app ``request`` gets without a listener of its own (with the lock held):
        an auto registration gets any app of its port (and names the process on it);
        an explicit one takes over an app only auto-publish made, which then stays until
        the session ends like any explicit registration. Neither is announced again."""
        if request.auto:
            listener = next((a for a in self.listeners if a.port == request.port), None)
            if listener is None:
                return None
            known = self._requests[listener.host_port]
            if not known.auto:
                self._also_auto.add(listener.host_port)
                self._requests[listener.host_port] = dataclasses.replace(
                    known, process=known.process or request.process
                )
                self._write_entry()
            return self._app(listener)
        listener = self._auto_only(request.port)
        if listener is None:
            return None
        self._claim(listener)
        log.info("app.claimed", sandbox_port=listener.port, host_port=listener.host_port)
        app = self._app(listener)
        assert listener.origin is not None
        # The origin stays the app's and so does its base path, `/`: every path reaches
        # the app unchanged. The base path asked for says where the agent's page is on it.
        url = listener.origin.url(request.base_path) + listener.url_suffix
        return dataclasses.replace(app, base_path=request.base_path, url=url)

    def _auto_only(self, port: int) -> AppListener | None:
        """The app of sandbox ``port`` that only auto-publish registered, if any."""
        return next(
            (a for a in self.listeners if a.port == port and self._requests[a.host_port].auto),
            None,
        )

    def _claim(self, listener: AppListener) -> None:
        """Make an auto-published app an explicit one (the sandbox asked for it itself):
        auto-publish's unregister no longer closes it."""
        known = self._requests[listener.host_port]
        self._requests[listener.host_port] = dataclasses.replace(known, auto=False)
        self._also_auto.add(listener.host_port)
        self._write_entry()

    def _listener(self, request: RegisterRequest) -> AppListener:
        """The listener for ``request``'s app, not started. Its modules (the relay's whole
        connection path) are imported with the session's first app: a session that
        serves none (``run -- make test``) never loads them."""
        from sandbridge.relay.listener.app_listener import AppListener

        return AppListener(request.port, request.base_path, self._connector, self._scope)

    async def _add_listener(self, request: RegisterRequest) -> AppListener:
        """A new listener for ``request`` (with the lock held)."""
        if len(self.listeners) >= self.settings.max_apps:
            raise RegistrationError(
                f"{APPS_LIMIT_PREFIX}{len(self.listeners)} apps; the limit is "
                f"{self.settings.max_apps}"
            )
        limit = self._new_auto
        if request.auto and not limit.admit(time.monotonic()):
            raise RegistrationError(
                f"{AUTO_RATE_PREFIX}{limit.limit} new apps in {limit.window:g} s; port "
                f"{request.port} is offered again on a later scan"
            )
        listener = self._listener(request)
        await listener.start()
        self.listeners.append(listener)
        self._requests[listener.host_port] = request
        self._write_entry()
        return listener

    async def restore(self, records: list[AppRecord]) -> None:
        """Serve the apps of ``records`` again (the daemon restarted under a running
        sandbox): each on its old host port and name, so its URL stays valid, unless the
        port was taken meanwhile; a private app gets a new token (never written down). A
        record no registration could have made, or repeating another's host port or
        name, is left out."""
        async with self._lock:
            for record in records[: self.settings.max_apps]:
                request = _request_of(record)
                origin = None if request is None else _origin_of(record, self.settings)
                if request is None or any(
                    a.host_port == record.host_port or _same_label(a.origin, origin)
                    for a in self.listeners
                ):
                    log.warning("app.not_restored", record=repr(record)[:200])
                    continue
                listener = self._listener(request)
                await listener.start(origin)
                self.listeners.append(listener)
                self._requests[listener.host_port] = request
            self._write_entry()
        for listener in self.listeners:
            self._announce(listener)

    async def unregister(self, request: UnregisterRequest) -> None:
        """Close the auto-published app at ``request.host_port``; refuse any other."""
        await self._close_app(request.host_port, owner=False)

    async def close_app(self, host_port: int) -> App:
        """The owner closes the app at ``host_port`` (any app: the dashboard's close)."""
        return await self._close_app(host_port, owner=True)

    async def _close_app(self, host_port: int, *, owner: bool) -> App:
        async with self._lock:
            listener = next((a for a in self.listeners if a.host_port == host_port), None)
            if listener is None:
                raise RegistrationError(f"no app of this session has host port {host_port}")
            if not owner and host_port in self._also_auto:
                # Auto-publish lets go of an app the sandbox also registered itself.
                self._also_auto.discard(host_port)
                log.info("app.kept", sandbox_port=listener.port, host_port=host_port)
                return self._app(listener)
            if not owner and not self._requests[listener.host_port].auto:
                raise RegistrationError(
                    f'host port {host_port} was not registered with "auto":true; '
                    "only auto-published apps can be unregistered"
                )
            app = self._app(listener)
            self.listeners.remove(listener)
            del self._requests[listener.host_port]
            self._also_auto.discard(listener.host_port)
            self._write_entry()
            # Under the lock: a registration that follows cannot get this host port
            # while the old listener still holds it.
            await listener.close()
        log.info("app.unregistered", sandbox_port=app.port, host_port=app.host_port)
        if self.on_unregister is not None:
            self.on_unregister(app)
        return app

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

    async def open_url(self, target: OpenTarget, read_html: ReadHtml = no_html) -> tuple[str, str]:
        """Resolve a sandbox-local URL to its app's host origin (the port's registration
        if it has one that serves the path, else a new one) and have it opened; an
        external URL is passed on as it is; inline HTML (``read_html``) is served as a
        snapshot on an origin of its own. Counted against the rate limit first, so a
        flood costs no registration, and a page is read only once there is room for it."""
        assert self.opener is not None
        self.opener.admit()
        if isinstance(target, ExternalTarget):
            return target.url, self.opener.open(target.url, external=True).value
        if isinstance(target, HtmlTarget):
            self._room_for_a_snapshot()
            url = await self._snapshot(await read_html())
            return url, self.opener.open(url).value
        url = await self._resolve(target)
        return url, self.opener.open(url, browsable=target.scheme == "http").value

    async def _resolve(self, target: LocalTarget) -> str:
        path = target.path
        async with self._lock:
            listener = next(
                (
                    listener
                    for listener in self.listeners
                    if listener.port == target.port and _serves(listener.base_path, path)
                ),
                None,
            )
            new = listener is None
            if listener is None:
                listener = await self._add_listener(RegisterRequest(target.port, "/"))
            elif self._requests[listener.host_port].auto:
                self._claim(listener)  # the URL the sandbox opens lasts like its own
        if new:
            self._announce(listener)
        assert listener.origin is not None
        token = None
        if listener.gate is not None and not listener.gate.token_used:
            # A private app's first visit needs its one-time token; after it, the
            # owner's browser holds the cookie and a token would be refused.
            token = f"{TOKEN_PARAM}={listener.gate.token}"
        return target.on(listener.origin.origin, extra_query=token)

    def _room_for_a_snapshot(self) -> None:
        if len(self.snapshots) >= MAX_SNAPSHOTS_PER_SESSION:
            raise RegistrationError(
                f"this session already serves {len(self.snapshots)} HTML snapshots; "
                f"the limit is {MAX_SNAPSHOTS_PER_SESSION}"
            )

    async def _snapshot(self, html: bytes) -> str:
        async with self._lock:
            self._room_for_a_snapshot()  # again: another page may have come meanwhile
            snapshot = Snapshot(html, self.settings.url_form)
            await snapshot.start()
            self.snapshots.append(snapshot)
        log.info("snapshot.served", bytes=len(html))
        return snapshot.url

    def _announce(self, listener: AppListener) -> App:
        app = self._app(listener)
        request = self._requests.get(listener.host_port)
        # The URL of a private app carries its one-time token: never log it.
        log.info(
            "app.registered",
            sandbox_port=app.port,
            host_port=app.host_port,
            auto=request is not None and request.auto,
            process=None if request is None else request.process,
        )
        if self.on_register is not None:
            self.on_register(app)
        if app.action is PublishAction.OPEN and self.opener is not None:
            # Auto-publish's per-port action goes through the open service like the
            # sandbox's own open requests: the owner's --open mode and the rate limit.
            with contextlib.suppress(RegistrationError):  # over the limit: it said so
                self.opener.admit()
                self.opener.open(app.url)
        return app

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
        await asyncio.gather(*(snapshot.close() for snapshot in self.snapshots))
        if self.owned is not None:
            await self.owned.close()
        self.listeners.clear()
        self.snapshots.clear()
        self._requests.clear()
        self._also_auto.clear()
        self.runtime_dir.remove()


def _request_of(record: AppRecord) -> RegisterRequest | None:
    """The registration ``record`` keeps, if the registration server could have taken it
    (``session.json`` read back after a restart is checked like any input), else None."""
    try:
        port = validate_port(record.port)
        base_path = normalize_base_path(record.base_path)
        process = None if record.process is None else validate_process_name(record.process)
        validate_port(record.host_port)
    except RegistrationError:
        return None
    if not isinstance(record.auto, bool) or not isinstance(record.url, str):
        return None
    return RegisterRequest(port, base_path, process, record.auto)


def _origin_of(record: AppRecord, settings: RelaySettings) -> AppOrigin | None:
    """The origin ``record``'s URL names, if it is one this session's URL form makes."""
    name = urllib.parse.urlsplit(record.url).hostname or ""
    label = name.removesuffix(f".{LOCALHOST_DOMAIN}")
    if settings.url_form is UrlForm.IP:
        return AppOrigin(record.host_port) if name == "127.0.0.1" else None
    return AppOrigin(record.host_port, label) if is_label(label) else None


def _same_label(one: AppOrigin | None, other: AppOrigin | None) -> bool:
    """Whether two origins share a name (cookies are per name, not per port)."""
    return (
        one is not None
        and other is not None
        and one.label is not None
        and (one.label == other.label)
    )


def _serves(base_path: str, path: str) -> bool:
    """Whether an app registered under ``base_path`` gets ``path`` unchanged (the
    base-path rule prefixes anything else)."""
    return base_path in ("/", path) or path.startswith(base_path + "/")
