"""The owner's dashboard as the daemon serves it (docs/dashboard.md, docs/daemon.md).

The daemon starts the dashboard's listener on the first ``sandbridge ui`` (a listener
nobody asked for is never opened) and keeps it for its own life; each ``sandbridge ui``
gets a new one-time login URL (``daemon_wire``'s dashboard request). The tables of the
sessions the daemon serves are read in-process, from each session's own ops and
terminal broker, and re-read as soon as one of them tells of a change (an app registered
or gone, a terminal request or its move, an egress decision or request: the sessions'
``on_change``), with no socket or thread per session. Sessions the daemon does not serve
(a ``sandbridge run --no-daemon``) are asked over their control sockets, by one feed
for all tabs, while a tab is open.

:func:`ask_url` is the other end: ``sandbridge ui`` asking the daemon for a URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

from sandbridge import log
from sandbridge.exceptions import ControlRefusal, DaemonError
from sandbridge.protocol import daemon_wire
from sandbridge.protocol.daemon_wire import Event
from sandbridge.session.lifecycle import Session
from sandbridge.ui import state
from sandbridge.ui.server import Dashboard, build_dashboard

# ``sandbridge ui`` waits this long for the daemon's answer: it is one small message,
# sent as soon as the dashboard listens.
ANSWER_TIMEOUT = 10.0


class DaemonDashboard:
    """The daemon's dashboard (started on the first URL asked) and the sessions it shows
    from the daemon's own state."""

    def __init__(self) -> None:
        self._dashboard: Dashboard | None = None
        self._starting = asyncio.Lock()
        self._sessions: dict[str, Session] = {}

    @property
    def port(self) -> int | None:
        return None if self._dashboard is None else self._dashboard.port

    def notify(self) -> None:
        """A served session changed: the open tabs get the new tables at once."""
        if self._dashboard is not None:
            self._dashboard.notify()

    @contextlib.contextmanager
    def serving(self, session: Session) -> Iterator[None]:
        """Show ``session`` from the daemon's state while the block runs."""
        self._sessions[session.entry.id] = session
        self.notify()
        try:
            yield
        finally:
            self._sessions.pop(session.entry.id, None)
            self.notify()

    async def login_url(self) -> str:
        """A new one-time login URL, the dashboard started first if it is not yet."""
        async with self._starting:
            if self._dashboard is None:
                dashboard = build_dashboard(self.snapshot)
                await dashboard.start()
                self._dashboard = dashboard
        return self._dashboard.login_url()

    async def snapshot(self) -> dict[str, Any]:
        """The tables: the daemon's sessions from its state, the others polled."""
        served: dict[str, state.Answers] = {}
        for name, session in list(self._sessions.items()):
            try:
                served[name] = await answers(session)
            except Exception as exc:  # one session's fault: it is asked as any other
                log.warning("daemon.dashboard_unreadable", session=name, error=repr(exc)[:200])
        return await asyncio.to_thread(state.snapshot, served)

    async def close(self) -> None:
        if self._dashboard is not None:
            await self._dashboard.close()


async def answers(session: Session) -> state.Answers:
    """What ``session``'s control socket would answer the dashboard, read in-process."""
    ops = session.ops
    try:
        pending = (await ops["egress_pending"]({}))["requests"]
    except ControlRefusal:  # a session without an egress gate
        pending = []
    questions = (await ops["questions"]({}))["questions"] if "questions" in ops else []
    return state.Answers(
        await ops["session_info"]({}),
        list((await ops["egress_summary"]({}))["destinations"]),
        [] if session.broker is None else session.broker.listing(),
        list(pending),
        # Its page actions travel on the control socket, which only a broker serves.
        controllable=session.broker is not None,
        apps=list(session.entry.record.apps),
        questions=list(questions),
    )


def ask_url(sock: socket.socket) -> str:
    """``sandbridge ui``'s side: ask the daemon on ``sock`` for a one-time dashboard URL;
    :class:`DaemonError` says why not (the daemon's own refusal, or no answer)."""
    sock.settimeout(ANSWER_TIMEOUT)
    try:
        sock.send(daemon_wire.encode(daemon_wire.dashboard_message()))
        data = sock.recv(daemon_wire.MAX_MESSAGE_BYTES + 1)
    except OSError as exc:
        raise DaemonError(f"the daemon did not answer the dashboard request: {exc}") from None
    if not data:
        raise DaemonError("the daemon closed the connection without a dashboard URL")
    kind, value = daemon_wire.decode_event(data)
    if kind is Event.ERROR:
        raise DaemonError(
            f"the daemon refused the dashboard request: {value} (`sandbridge ui --no-daemon` "
            "serves the page without it)"
        )
    if kind is not Event.DASHBOARD or not isinstance(value, str):
        raise DaemonError(f"the daemon answered {kind.value!r}, not a dashboard URL")
    log.debug("ui.daemon_url")
    return value
