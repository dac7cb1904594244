"""``--publish auto`` and ``--publish LOW-HIGH``: publish each port the sandbox starts
listening on, and withdraw it when the socket goes away.

Runs in the sandbox entry beside the command, only when the owner's rules
(``protocol/publish_rules.py``) publish something. Every :data:`POLL_INTERVAL` it reads
the sandbox's listening sockets (``relay/listening_ports.py``, a few lines of
``/proc``); :class:`PortTracker` (sans-I/O) turns the scans into what changed; the
loop registers each new port with the name of the process that listens and
``"auto": true``, and unregisters each gone one (``protocol/auto_registration.py``).
The host decides again from the same rules, so a port they do not publish is never
registered, whatever asks.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sandbridge import log
from sandbridge.protocol.auto_registration import (
    APPS_LIMIT_PREFIX,
    UNKNOWN_PROCESS,
    encode_auto_register_request,
    encode_unregister_request,
)
from sandbridge.protocol.publish_rules import PublishAction, PublishRule, decide
from sandbridge.relay.listening_ports import PROC, Listener, listening_ports, owners
from sandbridge.relay.url_helper import ask_relay

# Two scans a second: a new server is published, and a gone one closed, well within
# the 3 s a person notices; a scan reads a few lines of /proc (listeners only).
POLL_INTERVAL = 0.5
# Missing from this many scans in a row, a published port is withdrawn: a dev server
# that restarts (rebinds within half a second) keeps its URL, a gone one is closed
# within about 1.5 s.
GONE_AFTER_SCANS = 2


class PortState(enum.Enum):
    """Where one listening port stands with the host."""

    REGISTERING = "registering"  # offered by a scan; the answer is not known yet
    PUBLISHED = "published"
    REFUSED = "refused"  # not tried again while it listens
    WAITING = "waiting"  # the session is full: offered again once an app goes


@dataclass
class _Port:
    state: PortState
    host_port: int = 0
    missing: int = 0  # scans in a row without it


@dataclass(frozen=True, slots=True)
class Changes:
    """What one scan found: ports to register, and (port, host port) pairs to withdraw."""

    new: list[int] = field(default_factory=list)
    gone: list[tuple[int, int]] = field(default_factory=list)


class PortTracker:
    """The ports auto-publish knows, scan by scan (no I/O).

    :meth:`scan` offers each listening port the rules publish once; the caller reports
    how the host answered (:meth:`published`, :meth:`refused`, :meth:`session_full`),
    and :meth:`withdrawn` when a gone port's app is closed.
    """

    def __init__(self, rules: Sequence[PublishRule], exclude: Collection[int] = ()) -> None:
        self._rules = tuple(rules)
        self._exclude = frozenset(exclude)
        self._ports: dict[int, _Port] = {}
        self._wanted: dict[int, bool] = {}  # at most 65535 decisions, made once each
        self.full = False

    def wants(self, port: int) -> bool:
        """True if the rules publish ``port`` (and it is not published another way)."""
        wanted = self._wanted.get(port)
        if wanted is None:
            action = decide(self._rules, port)
            wanted = action not in (None, PublishAction.IGNORE) and port not in self._exclude
            self._wanted[port] = wanted
        return wanted

    def state(self, port: int) -> PortState | None:
        known = self._ports.get(port)
        return None if known is None else known.state

    def scan(self, listening: Collection[int]) -> Changes:
        """Compare ``listening`` with what is known; mark the new ports REGISTERING."""
        changes = Changes()
        for port, known in list(self._ports.items()):
            if port in listening:
                known.missing = 0
            elif known.state is PortState.PUBLISHED:
                known.missing += 1
                if known.missing >= GONE_AFTER_SCANS:
                    changes.gone.append((port, known.host_port))
                    del self._ports[port]
            elif known.state is not PortState.REGISTERING:
                del self._ports[port]  # refused or waiting: forgotten once it goes
        for port in sorted(listening):
            if port in self._ports or not self.wants(port):
                continue
            if self.full:
                self._ports[port] = _Port(PortState.WAITING)
            else:
                self._ports[port] = _Port(PortState.REGISTERING)
                changes.new.append(port)
        return changes

    def published(self, port: int, host_port: int) -> None:
        self._ports[port] = _Port(PortState.PUBLISHED, host_port)

    def refused(self, port: int) -> None:
        self._ports[port] = _Port(PortState.REFUSED)

    def session_full(self, port: int) -> None:
        """The host refused ``port`` at its limit of apps: stop offering new ports."""
        self.full = True
        self._ports[port] = _Port(PortState.WAITING)

    def withdrawn(self) -> None:
        """An app is gone, so there is room again: waiting ports are offered anew."""
        if self.full:
            self.full = False
            for port in [p for p, known in self._ports.items() if known.state is PortState.WAITING]:
                del self._ports[port]


async def auto_publish(
    rules: Sequence[PublishRule],
    socket_path: str,
    exclude: Collection[int] = (),
    proc: Path = PROC,
) -> None:
    """Publish and withdraw the sandbox's listening ports as ``rules`` say, until cancelled."""
    tracker = PortTracker(rules, exclude)
    while True:
        # In a thread: the entry's loop also serves the shim, which must not wait on /proc.
        listening = await asyncio.to_thread(listening_ports, proc)
        changes = tracker.scan(listening)
        for port, host_port in changes.gone:
            await _withdraw(tracker, port, host_port, socket_path)
        if changes.new:
            inodes = {listening[port].inode for port in changes.new}
            names = await asyncio.to_thread(owners, inodes, proc)
            for port in changes.new:
                listener = listening[port]
                process = names.get(listener.inode, UNKNOWN_PROCESS)
                await _publish(tracker, listener, process, socket_path)
        await asyncio.sleep(POLL_INTERVAL)


async def _publish(
    tracker: PortTracker, listener: Listener, process: str, socket_path: str
) -> None:
    port = listener.port
    if not listener.reachable:
        tracker.refused(port)
        log.warning(
            "auto_publish.unreachable",
            port=port,
            process=process,
            reason="it listens on ::1 only and the relay connects to 127.0.0.1; listen on "
            "127.0.0.1 or 0.0.0.0",
        )
        return
    if tracker.full:
        tracker.session_full(port)
        return
    try:
        answer = await asyncio.to_thread(
            ask_relay, encode_auto_register_request(port, process), socket_path
        )
    except (OSError, ValueError) as exc:
        tracker.refused(port)
        log.warning("auto_publish.failed", port=port, process=process, reason=str(exc))
        return
    host_port = answer.get("host_port")
    if answer.get("ok") is True and isinstance(host_port, int):
        tracker.published(port, host_port)
        return
    error = str(answer.get("error"))
    if error.startswith(APPS_LIMIT_PREFIX):
        tracker.session_full(port)
        log.warning(
            "auto_publish.session_full",
            port=port,
            process=process,
            reason=f"{error}; ports that listen from now on are published once an app goes",
        )
    else:
        tracker.refused(port)
        log.warning("auto_publish.refused", port=port, process=process, reason=error)


async def _withdraw(tracker: PortTracker, port: int, host_port: int, socket_path: str) -> None:
    try:
        answer = await asyncio.to_thread(
            ask_relay, encode_unregister_request(host_port), socket_path
        )
    except (OSError, ValueError) as exc:
        log.warning("auto_publish.withdraw_failed", port=port, reason=str(exc))
        return
    if answer.get("ok") is not True:
        log.warning("auto_publish.withdraw_refused", port=port, reason=str(answer.get("error")))
    tracker.withdrawn()
