"""Limits of the wire formats, each with the reason for its number."""

from __future__ import annotations

import collections

# A registration is a few dozen bytes; 4 KiB leaves room for long base paths and
# still refuses a sandbox that tries to make the host buffer megabytes.
MAX_REGISTRATION_BYTES = 4096

# A well-behaved helper sends its request at once; 5 s tolerates a loaded machine
# while a client that connects and never sends is dropped quickly.
REGISTRATION_READ_TIMEOUT = 5.0

# Longest base path accepted: matches common URL path limits of browsers' address
# bars being comfortably shorter than the 8 KiB request-target limit.
MAX_BASE_PATH_LENGTH = 1024

# Apps one session may register: ``--max-apps``, declared with the relay's other
# tunable limits in protocol/relay_settings.py.

# Registration connections served at once. A helper is done in milliseconds; a sandbox
# that opens thousands of silent connections gets refusals instead of host descriptors.
MAX_PENDING_REGISTRATIONS = 32

# The stream-mode opening line: a tiny JSON object.
MAX_STREAM_OPEN_BYTES = 4096

# How long the host waits for the shim's answer to a stream opening; the shim only
# has to connect to a loopback port, so 10 s means it is stuck.
STREAM_OPEN_TIMEOUT = 10.0

# v1 JSON carries whole bodies base64-encoded in one line (the contract's design).
# sandbridge speaks it for interop only and caps a body at 16 MiB, so the memory a
# v1 exchange can take stays bounded; streaming mode has no such cap.
MAX_V1_BODY_BYTES = 16 * 1024 * 1024

# A v1 line holds the base64 body (4/3 of its size) plus head fields.
MAX_V1_LINE_BYTES = (MAX_V1_BODY_BYTES * 4) // 3 + 256 * 1024

# How long a v1 exchange may take end to end before it is a 504-like failure (502).
V1_EXCHANGE_TIMEOUT = 120.0

# An open request's URL: long OAuth links (a few hundred characters of query) fit many
# times over, and the request stays within MAX_REGISTRATION_BYTES with its JSON around it.
MAX_OPEN_URL_LENGTH = 3072

# Open requests the host carries out per OPEN_WINDOW seconds; more are dropped. An agent
# opens a page now and then; a sandbox that opens more must not flood the owner's desktop
# with windows (or the terminal with lines).
MAX_OPENS_PER_WINDOW = 10
OPEN_WINDOW = 60.0

# ``sandbridge-open --html``: a page with inline styles and scripts is tens of KiB; a
# snapshot is held in the host's memory for the session, so a few MiB is the ceiling.
MAX_HTML_SNAPSHOT_BYTES = 2 * 1024 * 1024
# Snapshots one session may serve (each is a loopback listener, like an app).
MAX_SNAPSHOTS_PER_SESSION = 16
# The snapshot's bytes follow its request line at once; 10 s tolerates a loaded machine.
HTML_READ_TIMEOUT = 10.0


class WindowLimit:
    """At most ``limit`` events in any ``window`` seconds (a sliding window)."""

    def __init__(self, limit: int, window: float) -> None:
        self.limit = limit
        self.window = window
        self._times: collections.deque[float] = collections.deque()

    def admit(self, now: float) -> bool:
        """Count an event at ``now`` (monotonic seconds) if the window has room."""
        if self.delay(now) > 0:
            return False
        self._times.append(now)
        return True

    def delay(self, now: float) -> float:
        """Seconds from ``now`` until :meth:`admit` would count an event (0: at once)."""
        while self._times and now - self._times[0] >= self.window:
            self._times.popleft()
        if len(self._times) < self.limit:
            return 0.0
        if not self._times:  # a limit of 0: never
            return self.window
        # The same float expression as the test above, so a full window never reads as
        # open: ``first + window - now`` could be 0 while ``now - first < window`` kept the
        # first event (clocks in millisecond steps meet that edge often), and every event
        # was admitted until it left.
        return self.window - (now - self._times[0])


# New connections a sandbox may open per second on each host socket it reaches
# (aio/paced_server.py); past that they wait in the kernel's backlog. Far above what the
# sandbox's own tools need: ags-webview-url and sandbridge-open send one request each,
# auto-publish one at a time; the gate opens one per outgoing connection (a package
# install's many downloads go over a few kept-alive ones).
RELAY_SOCKET_RATE = 200
EGRESS_SOCKET_RATE = 1000
