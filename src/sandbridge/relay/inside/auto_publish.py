"""``--publish auto`` and ``--publish LOW-HIGH``: publish each port the sandbox starts
listening on, and withdraw it when the socket goes away.

Runs in the sandbox entry beside the command, only when the owner's rules
(``protocol/publish_rules.py``) publish something, on the entry's
:class:`~sandbridge.aio.poll_loop.PollLoop` (no event loop: the entry stays small; on
the event loop, by the same code, after a switch). Every :data:`POLL_INTERVAL` it reads
the sandbox's listening sockets (``relay/inside/listening_ports.py``, a few lines of
``/proc`` or one netlink dump: cheap enough to read in the loop); :class:`PortTracker`
(sans-I/O) turns the scans into what changed; :class:`AutoPublisher` registers each new
port with the name of the process that listens (asked again by the next
:data:`OWNER_LOOKUPS` scans while ``/proc`` does not show one) and ``"auto": true``, and unregisters
each gone one (``protocol/auto_registration.py``), one request at a time
(:class:`~sandbridge.relay.inside.relay_call.RelayCall`), and scans again once they are
answered. The host decides again from the same rules, so a port they do not publish is
never registered, whatever asks.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from sandbridge.aio.poll_loop import PollLoop, Timer
from sandbridge.event_line import warn
from sandbridge.protocol.publish_rules import PublishAction, PublishRule, decide
from sandbridge.protocol.sandbox_requests import (
    APPS_LIMIT_PREFIX,
    AUTO_RATE_PREFIX,
    UNKNOWN_PROCESS,
    encode_auto_register_request,
    encode_unregister_request,
)
from sandbridge.relay.inside.listening_ports import PROC, Listener, listening_ports, owners
from sandbridge.relay.inside.relay_call import Outcome, RelayCall

# Two scans a second: a new server is published, and a gone one closed, well within
# the 3 s a person notices; a scan reads a few lines of /proc (listeners only).
POLL_INTERVAL = 0.5
# Missing from this many scans in a row, a published port is withdrawn: a dev server
# that restarts (rebinds within half a second) keeps its URL, a gone one is closed
# within about 1.5 s.
GONE_AFTER_SCANS = 2
# A new port whose listener is not yet found in /proc is offered again by this many
# more scans before it is published as ``unknown``: the process that holds the socket
# may be between its listen and what /proc shows of it (a loaded machine, a process
# in an exec). Half a second each; a port whose owner is found is not held.
OWNER_LOOKUPS = 2


class PortState(enum.Enum):
    """Where one listening port stands with the host."""

    REGISTERING = "registering"  # offered by a scan; the answer is not known yet
    PUBLISHED = "published"
    REFUSED = "refused"  # not tried again while it listens
    WAITING = "waiting"  # the session is full: offered again once an app goes
    LOOKING = "looking"  # its owner was not found: offered again by the next scan


class _Port:
    __slots__ = ("host_port", "lookups", "missing", "state")

    def __init__(self, state: PortState, host_port: int = 0) -> None:
        self.state = state
        self.host_port = host_port
        self.missing = 0  # scans in a row without it
        self.lookups = 0  # scans that did not find who listens


class Changes:
    """What one scan found: ports to register, and (port, host port) pairs to withdraw."""

    __slots__ = ("gone", "new")

    def __init__(self) -> None:
        self.new: list[int] = []
        self.gone: list[tuple[int, int]] = []


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
        # The host refused a port of this scan for its rate of new apps: the scan's other
        # new ports wait too, and all of them are offered again by a later scan.
        self.throttled = False

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
        self.throttled = False
        for port, known in list(self._ports.items()):
            if port in listening:
                known.missing = 0
            elif known.state is PortState.PUBLISHED:
                known.missing += 1
                if known.missing >= GONE_AFTER_SCANS:
                    changes.gone.append((port, known.host_port))
                    del self._ports[port]
            elif known.state is not PortState.REGISTERING:
                del self._ports[port]  # refused, waiting or looked for: forgotten once it goes
        for port in sorted(listening):
            looked_for = self._ports.get(port)
            if looked_for is not None and looked_for.state is PortState.LOOKING:
                looked_for.state = PortState.REGISTERING
                changes.new.append(port)
                continue
            if looked_for is not None or not self.wants(port):
                continue
            if self.full:
                self._ports[port] = _Port(PortState.WAITING)
            else:
                self._ports[port] = _Port(PortState.REGISTERING)
                changes.new.append(port)
        return changes

    def look_again(self, port: int) -> bool:
        """Who listens on new ``port`` was not found: True if the next scan offers it
        again (at most :data:`OWNER_LOOKUPS` times), False if it is offered now."""
        known = self._ports[port]
        if known.lookups >= OWNER_LOOKUPS:
            return False
        known.lookups += 1
        known.state = PortState.LOOKING
        return True

    def published(self, port: int, host_port: int) -> None:
        self._ports[port] = _Port(PortState.PUBLISHED, host_port)

    def refused(self, port: int) -> None:
        self._ports[port] = _Port(PortState.REFUSED)

    def deferred(self, port: int) -> None:
        """The host refused ``port`` for its rate of new apps: a later scan offers it
        again (it is forgotten), and this scan offers no more."""
        self.throttled = True
        self._ports.pop(port, None)

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


# One step after a scan: it starts a request on relay.sock (True; its answer runs the
# next step), or decides without one (False).
_Step = Callable[[], bool]


class AutoPublisher:
    """Publishes and withdraws the sandbox's listening ports as ``rules`` say, on
    ``loop``, from :meth:`start` until :meth:`close`; each scan's requests are sent one
    after another, and the next scan comes :data:`POLL_INTERVAL` after the last answer."""

    def __init__(
        self,
        loop: PollLoop,
        rules: Sequence[PublishRule],
        socket_path: str,
        exclude: Collection[int] = (),
        proc: Path = PROC,
    ) -> None:
        self._loop = loop
        self._tracker = PortTracker(rules, exclude)
        self._socket_path = socket_path
        self._proc = proc
        self._steps: deque[_Step] = deque()
        self._next_scan: Timer | None = None
        self._call: RelayCall | None = None
        self._told_throttled = False

    def start(self) -> None:
        """Scan now, and from then on every :data:`POLL_INTERVAL`."""
        self._scan()

    def close(self) -> None:
        """Stop scanning and drop any request in flight (the session is ending)."""
        self._steps.clear()
        if self._next_scan is not None:
            self._next_scan.cancel()
            self._next_scan = None
        if self._call is not None:
            self._call.close()
            self._call = None

    def _scan(self) -> None:
        self._next_scan = None
        listening = listening_ports(self._proc)
        changes = self._tracker.scan(listening)
        for port, host_port in changes.gone:
            self._steps.append(self._withdraw_step(port, host_port))
        if changes.new:
            names = owners({listening[port].inode for port in changes.new}, self._proc)
            for port in changes.new:
                listener = listening[port]
                process = names.get(listener.inode)
                if process is None and self._tracker.look_again(port):
                    continue
                self._steps.append(self._publish_step(listener, process or UNKNOWN_PROCESS))
        self._run_steps()

    def _run_steps(self) -> None:
        """Run the steps left until one waits for an answer; then scan again later."""
        self._call = None
        while self._steps:
            if self._steps.popleft()():
                return
        self._next_scan = self._loop.call_later(POLL_INTERVAL, self._scan)

    def _ask(self, request: bytes, answered: Callable[[Outcome], None]) -> bool:
        def done(outcome: Outcome) -> None:
            answered(outcome)
            self._run_steps()

        self._call = RelayCall(self._loop, self._socket_path, request, done)
        return True

    def _publish_step(self, listener: Listener, process: str) -> _Step:
        return lambda: self._publish(listener, process)

    def _withdraw_step(self, port: int, host_port: int) -> _Step:
        return lambda: self._ask(
            encode_unregister_request(host_port), lambda outcome: self._withdrawn(port, outcome)
        )

    def _publish(self, listener: Listener, process: str) -> bool:
        port = listener.port
        tracker = self._tracker
        if tracker.full:
            tracker.session_full(port)
            return False
        if tracker.throttled:
            tracker.deferred(port)
            return False
        return self._ask(
            encode_auto_register_request(port, process),
            lambda outcome: self._published(listener, process, outcome),
        )

    def _published(self, listener: Listener, process: str, outcome: Outcome) -> None:
        tracker = self._tracker
        port, address = listener.port, listener.address
        if isinstance(outcome, Exception):
            tracker.refused(port)
            warn(
                "auto_publish.failed",
                port=port,
                process=process,
                address=address,
                reason=str(outcome),
            )
            return
        host_port = outcome.get("host_port")
        if outcome.get("ok") is True and isinstance(host_port, int):
            tracker.published(port, host_port)
            self._told_throttled = False
            return
        error = str(outcome.get("error"))
        if error.startswith(AUTO_RATE_PREFIX):
            tracker.deferred(port)
            if not self._told_throttled:  # once until a port is published again
                self._told_throttled = True
                warn("auto_publish.throttled", port=port, process=process, reason=error)
        elif error.startswith(APPS_LIMIT_PREFIX):
            tracker.session_full(port)
            warn(
                "auto_publish.session_full",
                port=port,
                process=process,
                reason=f"{error}; ports that listen from now on are published once an app goes",
            )
        else:
            tracker.refused(port)
            warn("auto_publish.refused", port=port, process=process, address=address, reason=error)

    def _withdrawn(self, port: int, outcome: Outcome) -> None:
        if isinstance(outcome, Exception):
            warn("auto_publish.withdraw_failed", port=port, reason=str(outcome))
            return
        if outcome.get("ok") is not True:
            warn("auto_publish.withdraw_refused", port=port, reason=str(outcome.get("error")))
        self._tracker.withdrawn()
