"""``sandbridge connect``: a far machine's apps as local dedicated origins on the laptop.

Every app of every far session gets a local app listener of its own
(``relay/listener/app_listener.py``, the very listener a local app gets: loopback only, its own
``<label>.localhost`` site, the same strict HTTP parsing, Host and Origin checks,
WebSocket and SSE, limits and watchdogs). Only its upstream differs: where a local
app's listener opens ``upstream.sock``, this one opens a stream on the link
(:class:`RemoteConnector`), which ``serve-stdio`` connects to the far session's
``upstream.sock``.

When the link drops, every stream on it ends (open WebSockets close, so a page's own
reconnect starts), the listeners stay, answering ``502`` meanwhile, and the link is
opened again with backoff; the apps the far side lists again keep their local origins.
A far machine that stays unreachable for ``gone_after`` seconds is given up: its
listeners close, a line says so, and ``connect`` ends with status 1.

A far app listed as private is served as a local private app is (the listener's
``AccessGate``): a one-time token of the laptop's own, said once in the line that
announces the app, then a cookie; the far machine's token never crosses. Its listener,
and so its token and cookie, outlive a reconnect like any far app's origin.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import TextIO

from sandbridge import log
from sandbridge.aio.tasks import first_done, running
from sandbridge.exceptions import (
    RemoteLinkError,
    RemoteLinkRefused,
    RemoteWireError,
    StreamRefused,
    UpstreamError,
)
from sandbridge.places.remotes import CONTROL, RemoteAppRecord, RemoteEntry
from sandbridge.protocol.limits import WindowLimit
from sandbridge.protocol.remote_wire import AppsListed, Described, FarApp, Role, parse_apps
from sandbridge.relay.host.channel import Channel
from sandbridge.relay.host.settings import ForwardingMode, RelaySettings, SessionScope
from sandbridge.relay.host.upstream import UNIX_BUFFER_BYTES, UpstreamConnector
from sandbridge.relay.listener.app_listener import AppListener
from sandbridge.remote.mux import Mux
from sandbridge.remote.stream_transport import StreamTransport
from sandbridge.remote.terminal_relay import TerminalRelay
from sandbridge.remote.transport import Link, OpenLink

# Reconnect backoff: the first retry soon (a blip), doubling to at most a few seconds
# (a machine rebooting), so the apps are back soon after the far side is.
FIRST_RETRY_SECONDS = 0.5
MAX_RETRY_SECONDS = 8.0
# A link up at least this long was healthy: the next drop starts the backoff again.
STABLE_LINK_SECONDS = 10.0
# A far machine unreachable this long is gone for good: its local origins close.
GONE_AFTER_SECONDS = 300.0
# Far apps served per machine (a local listener each) are bounded by the link itself:
# an APPS list of more than remote_wire.MAX_APPS ends the link.
# A new APPS list is applied at most this often (the far side reads its registry at
# most every 0.25 s, in a burst of registrations: places/registry_watch.py): a far side
# sending list after list at the link's speed does not make the laptop open and close
# listeners as fast, nor parse the lists: only the latest is kept, parsed when applied.
APPLY_INTERVAL_SECONDS = 0.5
# A change of more apps than this is said in one line, not a line per app: a hostile far
# side alternating two long lists must not flood the owner's terminal.
MAX_APP_LINES = 16
# Lines about a machine's apps (added, gone, a summary) said in any minute: a far side
# alternating two short lists would otherwise make 16 lines per list, 32 a second for
# as long as it likes, each a write on connect's one event loop. Beyond this the lines
# are counted and the count said with the next line that fits. An honest machine says
# a few lines when it connects (a summary past 16 apps) and one as an app comes or goes.
APP_LINES_PER_MINUTE = 60


class RemoteConnector(UpstreamConnector):
    """A far app's upstream: one stream on the link per browser connection.

    The app listener reads and writes a :class:`Channel`; here its transport is the
    stream itself (:class:`StreamTransport`: no socket pair, no task), so the listener's
    data path (parsing, keep-alive, upgrades, backpressure) is the local one, unchanged."""

    def __init__(self, machine: Machine, session: str) -> None:
        super().__init__(Path(f"{machine.name}:{session}"), ForwardingMode.STREAM)
        self.machine = machine
        self.session = session

    async def open(self, port: int) -> tuple[Channel, bytes] | None:
        mux = self.machine.mux
        if mux is None or mux.closed is not None:
            raise UpstreamError(f"the link to {self.machine.name} is down; reconnecting")
        try:
            stream = await mux.open(self.session, port)
        except ConnectionRefusedError as exc:
            raise StreamRefused(f"{self.machine.name} refused: {exc}") from None
        except (ConnectionError, RemoteWireError) as exc:  # the link lost, or 1024 streams
            raise UpstreamError(f"the link to {self.machine.name} failed: {exc}") from None
        channel = Channel(UNIX_BUFFER_BYTES)
        StreamTransport(mux, stream, channel)
        return channel, b""


class Machine:
    """One far machine as the laptop serves it."""

    def __init__(
        self,
        name: str,
        open_link: OpenLink,
        entry: RemoteEntry | None = None,
        out: TextIO | None = None,
        gone_after: float = GONE_AFTER_SECONDS,
    ) -> None:
        self.name = name
        self._open_link = open_link
        self._entry = entry
        self._out = sys.stderr if out is None else out
        self._gone_after = gone_after
        self.mux: Mux | None = None
        self.listeners: dict[FarApp, AppListener] = {}
        # Per far session, and apart for its private apps: a private listener takes its
        # gate from its scope's settings, as a local private session's listeners do.
        self._scopes: dict[tuple[str, bool], SessionScope] = {}
        # The latest APPS list not applied yet, as it arrived (parsed when applied).
        self._listed: AppsListed | None = None
        # The far sessions as the far side last described them, for the dashboard.
        self._described: Described = ()
        self._changed = asyncio.Event()
        self._app_lines = WindowLimit(APP_LINES_PER_MINUTE, 60.0)
        self._unsaid = 0  # app lines over the budget, not said yet

    def _say(self, line: str) -> None:
        print(f"sandbridge: {self.name}: {line}", file=self._out, flush=True)

    def _say_app(self, line: str | None) -> None:
        """Say ``line`` about the apps within :data:`APP_LINES_PER_MINUTE` (else count
        it); first, the count of those not said, if there is room for it."""
        now = time.monotonic()
        if self._unsaid and self._app_lines.admit(now):
            self._say(f"({self._unsaid} lines about its apps were not shown)")
            self._unsaid = 0
        if line is not None:
            if self._app_lines.admit(now):
                self._say(line)
                return
            if not self._unsaid:  # the budget is spent: said once, beyond it
                self._say(
                    f"more lines about its apps this minute are counted, not shown (over "
                    f"{APP_LINES_PER_MINUTE} a minute; sandbridge ls lists them)"
                )
            self._unsaid += 1

    async def run(self) -> int:
        """Serve the machine until it is gone for good (1) or the task is cancelled; with
        an ``ls`` entry, also its terminal control socket (``remote/terminal_relay.py``)."""
        if self._entry is None:
            return await self._reconnect()
        relay = TerminalRelay(self.name, self._entry.path / CONTROL, lambda: self.mux)
        async with running(relay.serve()):
            return await self._reconnect()

    async def _reconnect(self) -> int:
        delay = FIRST_RETRY_SECONDS
        down_since = time.monotonic()
        try:
            while True:
                try:
                    link = await self._open_link()
                except RemoteLinkRefused as exc:  # retrying would only repeat it
                    self._say(f"cannot connect: {exc}")
                    return 1
                except RemoteLinkError as exc:
                    self._say(f"cannot connect: {exc}")
                else:
                    opened = time.monotonic()
                    try:
                        reason = await self._serve(link)
                    finally:
                        self.mux = None
                        await link.close()
                    if reason is not None:  # it was up: start the clock again
                        self._say(f"link lost ({reason}); reconnecting")
                        self._record(False)
                        down_since = time.monotonic()
                        # A link that breaks at once (a far side that breaks the
                        # protocol, a flapping network) keeps backing off.
                        if down_since - opened >= STABLE_LINK_SECONDS:
                            delay = FIRST_RETRY_SECONDS
                down_for = time.monotonic() - down_since
                if down_for >= self._gone_after:
                    await self._drop_all()
                    self._say(
                        f"gone: no link for {down_for:.0f} s; its apps are removed "
                        f"(run sandbridge connect again when it is back)"
                    )
                    return 1
                await asyncio.sleep(min(delay, self._gone_after - down_for))
                delay = min(delay * 2, MAX_RETRY_SECONDS)
        finally:
            await self._drop_all()

    async def _serve(self, link: Link) -> str | None:
        """Serve one link; the reason it ended, or None if it never came up."""
        mux = Mux(link, Role.LAPTOP, on_apps=self._apps_listed)
        try:
            await mux.handshake()
        except RemoteLinkError as exc:
            self._say(f"cannot connect: {exc}")
            return None
        self.mux = mux
        self._say(f"connected ({link.description})")
        self._record(True)
        self._listed = None  # a list of the link before is no list of this one
        self._changed.clear()
        async with running(mux.run(), self._follow_apps(mux)) as (reading, following):
            await first_done(reading, following)
            if not reading.done():
                following.result()  # following ends only by ending the link (or a bug)
        return mux.closed or "the link was closed"

    def _apps_listed(self, listed: AppsListed) -> None:
        self._listed = listed
        self._changed.set()

    async def _follow_apps(self, mux: Mux) -> None:
        """Apply the latest list, then at most one every APPLY_INTERVAL_SECONDS; return
        once a list is refused (the link ended, naming why)."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            listed, self._listed = self._listed, None
            if listed is None:
                continue
            try:
                apps = parse_apps(listed)
            except RemoteWireError as exc:
                mux.fail(exc)
                return
            self._described = apps.sessions
            await self._apply(apps.apps)
            # Lists that come meanwhile are kept unparsed: the latest is applied next.
            await asyncio.sleep(APPLY_INTERVAL_SECONDS)

    async def _apply(self, apps: tuple[FarApp, ...]) -> None:
        wanted = set(apps)
        gone = [app for app in self.listeners if app not in wanted]
        added = [app for app in dict.fromkeys(apps) if app not in self.listeners]
        each = len(gone) + len(added) <= MAX_APP_LINES
        said: list[str] = []  # said once recorded: an app announced is one ls lists
        try:
            for app in gone:
                # Forgotten only once closed: a cancel meanwhile leaves it to _drop_all.
                await self.listeners[app].close()
                del self.listeners[app]
                if each:
                    said.append(f"{app.session} port {app.port} is gone")
            unserved: list[OSError] = []
            private_said = 0
            for app in added:
                scope = self._scopes.setdefault(
                    (app.session, app.private), SessionScope(RelaySettings(private=app.private))
                )
                listener = AppListener(
                    app.port, app.base_path, RemoteConnector(self, app.session), scope
                )
                try:
                    await listener.start()
                except OSError as exc:  # out of descriptors or ports: this app, not the link
                    unserved.append(exc)
                    continue
                self.listeners[app] = listener
                # A private app's URL carries its one-time token: said here once, as `run`
                # says a local one's, and never written (the ls record is token-free); so it
                # is said even in a burst, for the first MAX_APP_LINES private apps of it.
                if each or (app.private and private_said < MAX_APP_LINES):
                    said.append(f"{app.session} port {app.port} -> {listener.app.url}")
                    private_said += app.private
            if not each:
                said.append(
                    f"{len(added) - len(unserved)} apps added, {len(gone)} gone "
                    f"({len(self.listeners)} served; sandbridge ls lists them)"
                )
            if unserved:
                # Tried again with the next list; one line, however many failed.
                said.append(f"{len(unserved)} apps not served: cannot listen: {unserved[0]}")
            self._forget_unused_scopes()
            self._record(True)
        finally:  # cancelled mid-list (the link lost): what it served is still said, once
            for line in said:
                self._say_app(line)
            self._say_app(None)  # the count of lines not said, if it fits now

    def _forget_unused_scopes(self) -> None:
        # Only the sessions served now keep a scope: a far side naming fresh sessions in
        # every list must not leave one per name ever listed (memory without bound).
        in_use = {(app.session, app.private) for app in self.listeners}
        self._scopes = {key: scope for key, scope in self._scopes.items() if key in in_use}

    def _record(self, connected: bool) -> None:
        if self._entry is None:
            return
        apps = [
            RemoteAppRecord(
                app.session,
                app.port,
                app.base_path,
                listener.origin.url(app.base_path),  # token-free: the token is said once
                listener.host_port,
                app.private,
            )
            for app, listener in self.listeners.items()
            if listener.origin is not None
        ]
        if not connected:  # what the far side said of its sessions no longer holds
            self._described = ()
        try:
            self._entry.update(connected, apps, self._described)
        except OSError as exc:
            log.warning("remote.record_failed", machine=self.name, error=str(exc))

    async def _drop_all(self) -> None:
        listeners, self.listeners = list(self.listeners.values()), {}
        for listener in listeners:
            await listener.close()
        self._forget_unused_scopes()
        self._record(False)
