"""The relay's tunable limits, each declared once: name, type, bounds, default, unit, doc.

Every place a limit crosses derives from the declaration here: the command line's flags
and their help (``cli/relay_options.py``), the session options the ``run`` client sends
the daemon (``session/options_wire.py``), the defaults of
:class:`~sandbridge.relay.host.settings.RelaySettings` and its own check, and the table in
docs/relay.md ("Settings", checked against this one by
``tests/protocol/test_relay_settings.py``). A value is refused by :meth:`Limit.check`
alone, with the name it was given under, the bounds and the value, so a flag, a wire
field and a setting made in code keep one rule. None of these has a key in
``.sandbridge/config``: a project's policy says what its sandbox may reach, not how the
owner's relay serves it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

Number = TypeVar("Number", int, float)

# A timeout longer than a day bounds nothing a person waits for; the bound keeps a value
# that came from the wire a finite deadline that asyncio's timers and the C front door's
# clock arithmetic can add to the time.
MAX_TIMEOUT_SECONDS = 86400.0
# Each browser connection costs the host two descriptors; the kernel's default ceiling
# on a process's descriptors (fs.nr_open) is 1,048,576, so more could never be open.
MAX_CONNECTIONS = 1 << 20
# The C front door keeps at most MAX_POOL (64) idle app connections per app
# (relay/front/_front_thread.h: ``#define MAX_POOL 64``) and used to cut a larger size down to it
# without a word; the size is refused above it here instead.
MAX_POOL_SIZE = 64


@dataclass(frozen=True)
class Limit(Generic[Number]):
    """One tunable limit of the relay and every name it goes by."""

    # The field of RelaySettings.
    name: str
    kind: type[Number]
    default: Number
    minimum: Number
    maximum: Number
    # Whether ``minimum`` itself is refused (a timeout of 0 s is no time at all).
    exclusive_minimum: bool
    # What a value counts: "seconds", "connections", "apps".
    unit: str
    # One line for --help and the docs table.
    doc: str
    # The flag of ``sandbridge run``, ``host`` and ``demo``.
    flag: str
    # The key in the session options the run client sends the daemon.
    wire: str

    @property
    def dest(self) -> str:
        """The flag's attribute on argparse's namespace."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def bounds(self) -> str:
        """The values allowed, in words: ``an integer from 0 to 64``."""
        low, high = self.text(self.minimum), self.text(self.maximum)
        if self.kind is int:
            return f"an integer from {low} to {high}"
        above = "more than" if self.exclusive_minimum else "at least"
        return f"{above} {low} and at most {high} {self.unit}"

    def text(self, value: float) -> str:
        """``value`` as --help and the docs write it: ``75``, ``0.5``, ``1048576``."""
        return str(value) if self.kind is int else f"{value:g}"

    def check(self, value: object, label: str) -> Number:
        """``value`` as this limit's type if it is within the bounds; otherwise
        :class:`ValueError` naming ``label`` (the flag, the wire key), the bounds and the
        value. A bool is no number here, an integer limit takes no fraction, and NaN and
        infinity are outside every bound."""
        number = _number(value, integral=self.kind is int)
        if number is None or not self._within(number):
            raise ValueError(f"{label} must be {self.bounds}, got {value!r:.80}")
        return self.kind(number)

    def _within(self, number: float) -> bool:
        if self.exclusive_minimum:
            return self.minimum < number <= self.maximum
        return self.minimum <= number <= self.maximum


def _number(value: object, *, integral: bool) -> float | None:
    """``value`` as a finite number, or ``None`` (a bool, a string, NaN, a fraction
    where an integer is asked)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if integral and not isinstance(value, int):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


KEEPALIVE_TIMEOUT = Limit(
    name="keepalive_timeout",
    kind=float,
    # Browsers reconnect silently after an idle keep-alive connection is closed.
    default=75.0,
    minimum=0.0,
    maximum=MAX_TIMEOUT_SECONDS,
    exclusive_minimum=True,
    unit="seconds",
    doc="close an idle browser connection after SECONDS",
    flag="--keepalive-timeout",
    wire="keepalive_timeout",
)
HEADER_TIMEOUT = Limit(
    name="header_timeout",
    kind=float,
    # Once a request has begun, its head must be complete this soon (slowloris).
    default=15.0,
    minimum=0.0,
    maximum=MAX_TIMEOUT_SECONDS,
    exclusive_minimum=True,
    unit="seconds",
    doc="a begun request head must be complete within SECONDS (408)",
    flag="--header-timeout",
    wire="header_timeout",
)
RESPONSE_TIMEOUT = Limit(
    name="response_timeout",
    kind=float,
    # After the request is sent, the app has this long (without upload progress) to
    # start its response: long-polls of a few minutes fit. Streams that started are
    # never cut.
    default=300.0,
    minimum=0.0,
    maximum=MAX_TIMEOUT_SECONDS,
    exclusive_minimum=True,
    unit="seconds",
    doc="the app must start its response within SECONDS (502); a browser that takes "
    "nothing of a response for SECONDS is dropped",
    flag="--response-timeout",
    wire="response_timeout",
)
MAX_CONNECTIONS_PER_APP = Limit(
    name="max_connections_per_app",
    kind=int,
    # Hundreds of WebSockets fit with room to spare.
    default=1024,
    minimum=1,
    maximum=MAX_CONNECTIONS,
    exclusive_minimum=False,
    unit="connections",
    doc="open browser connections per app (503 past it)",
    flag="--max-connections-per-app",
    wire="max_connections_per_app",
)
MAX_CONNECTIONS_PER_SESSION = Limit(
    name="max_connections",
    kind=int,
    # Each costs two descriptors in the host's process.
    default=4096,
    minimum=1,
    maximum=MAX_CONNECTIONS,
    exclusive_minimum=False,
    unit="connections",
    doc="open browser connections per session (503 past it)",
    flag="--max-connections",
    wire="max_connections",
)
MAX_APPS = Limit(
    name="max_apps",
    kind=int,
    # Far above any real dev setup, low enough that a sandbox cannot exhaust the host's
    # ports or descriptors by registering. Its maximum: each app holds a host loopback
    # port and a listener, and a thousand is far beyond any setup.
    default=64,
    minimum=1,
    maximum=1024,
    exclusive_minimum=False,
    unit="apps",
    doc="registrations per session (refused past it)",
    flag="--max-apps",
    wire="max_apps",
)
APP_POOL_SIZE = Limit(
    name="pool_size",
    kind=int,
    # Idle app connections kept per app for the next browser connection, in the front
    # door's pool and the relay's together (relay/front/front.py, park_upstream).
    default=8,
    minimum=0,
    maximum=MAX_POOL_SIZE,
    exclusive_minimum=False,
    unit="connections",
    doc="idle app connections kept per app for the next browser connection, the front "
    "door's and the relay's together; 0: none",
    flag="--app-pool-size",
    wire="pool_size",
)
APP_POOL_IDLE = Limit(
    name="pool_idle_seconds",
    kind=float,
    # Shorter than the keep-alive timeouts of common app servers (Node and uvicorn: 5 s),
    # so the app rarely closes a kept connection first. Its maximum: a kept connection
    # holds an app that serves one connection at a time, and past five minutes every
    # common app server has closed it anyway.
    default=2.0,
    minimum=0.0,
    maximum=300.0,
    exclusive_minimum=True,
    unit="seconds",
    doc="close a kept idle app connection after SECONDS",
    flag="--app-pool-idle",
    wire="pool_idle_seconds",
)

AUTO_PUBLISH_APPS = Limit(
    name="auto_publish_limit",
    kind=int,
    # A port that stops listening is withdrawn, so without a limit a sandbox that opens
    # and closes ports as fast as it can had the host bind a listener, rewrite the
    # session's entry twice and print lines about 330 times a second, taking a daemon's
    # one event loop from every other session. Real servers start a few at a time: 32 at
    # once pass (a test suite starting servers too), and the auto-publisher offers a port
    # refused for this again on a later scan, so it is published within the window. Its
    # maximum: no more apps than --max-apps allows at all.
    default=32,
    minimum=1,
    maximum=1024,
    exclusive_minimum=False,
    unit="apps",
    doc="new apps auto-publish may make per --auto-publish-window; later ports wait",
    flag="--auto-publish-apps",
    wire="auto_publish_limit",
)
AUTO_PUBLISH_WINDOW = Limit(
    name="auto_publish_window",
    kind=float,
    default=5.0,
    minimum=0.0,
    maximum=MAX_TIMEOUT_SECONDS,
    exclusive_minimum=True,
    unit="seconds",
    doc="the sliding window of --auto-publish-apps, in SECONDS",
    flag="--auto-publish-window",
    wire="auto_publish_window",
)

# Every declared limit, in the order of --help and the docs table.
LIMITS: tuple[Limit[float] | Limit[int], ...] = (
    KEEPALIVE_TIMEOUT,
    HEADER_TIMEOUT,
    RESPONSE_TIMEOUT,
    MAX_CONNECTIONS_PER_APP,
    MAX_CONNECTIONS_PER_SESSION,
    APP_POOL_SIZE,
    APP_POOL_IDLE,
    MAX_APPS,
    AUTO_PUBLISH_APPS,
    AUTO_PUBLISH_WINDOW,
)


def checked(
    values: Mapping[str, object], label: Callable[[Limit[float] | Limit[int]], str]
) -> dict[str, Any]:
    """Every declared limit's value, read from ``values`` under ``label(limit)`` (its
    flag, its wire key) and checked: the keyword arguments of RelaySettings (each
    value of its field's type). The first value out of bounds (or missing) raises
    :class:`ValueError` naming that label."""
    return {limit.name: limit.check(values.get(label(limit)), label(limit)) for limit in LIMITS}
