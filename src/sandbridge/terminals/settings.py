"""Terminal timings: the issue's defaults, and hidden knobs that let tests run in seconds.

The knobs are environment variables of the host (``sandbridge run``), read once at start
and validated against the ranges below; they can only shorten a terminal's life or slow
the authority (a test of a slow refresh), never lengthen a lease past 10 s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sandbridge.exceptions import SandbridgeError

# Authority is re-checked this often (the 5 s) ...
REFRESH = 5.0
# ... and each confirmation is good for at most this long (the 10 s): two missed
# refreshes close the terminal.
LEASE = 10.0
# The worker must be ready within this budget; a terminal starts only if the approval's
# remaining life covers it.
READY_BUDGET = 5.0
# A terminal nobody types into and that prints nothing for 5 minutes is closed.
IDLE = 300.0
# The foreground gets this long after SIGHUP before everything left is killed.
HANGUP_GRACE = 2.0
# The client's and the worker's heartbeat interval.
HEARTBEAT = 5.0
# After a STOP, a worker that has not ended within its grace plus this margin is cut off.
STOP_MARGIN = 5.0
# How far ahead of this machine's clock a signer's may be (approval.py): an approval
# signed on a laptop expires at the laptop's now + ttl. Beyond it, an expiry further away
# than the ttl is refused, so every approval (and the reservation kept until it expires)
# ends within MAX_TTL + MAX_CLOCK_SKEW of its use. Five minutes, as Kerberos allows.
MAX_CLOCK_SKEW = 5 * 60.0

_KNOBS: dict[str, tuple[str, float, float]] = {
    # attribute: (variable, lowest, highest)
    "lease": ("SANDBRIDGE_TERMINAL_LEASE", 1.0, LEASE),
    "refresh": ("SANDBRIDGE_TERMINAL_REFRESH", 0.1, REFRESH),
    "idle": ("SANDBRIDGE_TERMINAL_IDLE", 1.0, IDLE),
    "hangup_grace": ("SANDBRIDGE_TERMINAL_HANGUP_GRACE", 0.1, 30.0),
    "refresh_delay": ("SANDBRIDGE_TERMINAL_REFRESH_DELAY", 0.0, LEASE - REFRESH),
}
RELAY_TAP = "SANDBRIDGE_TERMINAL_RELAY_TAP"


@dataclass(frozen=True, slots=True)
class TerminalSettings:
    lease: float = LEASE
    refresh: float = REFRESH
    ready_budget: float = READY_BUDGET
    idle: float = IDLE
    hangup_grace: float = HANGUP_GRACE
    # Test knob: every authority check takes this long (a slow owner's machine).
    refresh_delay: float = 0.0
    # Test knob: append every relayed frame body to this file, to prove it is ciphertext.
    relay_tap: Path | None = None

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> TerminalSettings:
        env = dict(os.environ) if env is None else env
        values: dict[str, float] = {}
        for attribute, (name, low, high) in _KNOBS.items():
            if name not in env:
                continue
            try:
                value = float(env[name])
            except ValueError:
                value = float("nan")
            if not low <= value <= high:
                raise SandbridgeError(f"{name}={env[name]!r}: choose a number in {low:g}..{high:g}")
            values[attribute] = value
        settings = cls(**values, relay_tap=Path(env[RELAY_TAP]) if env.get(RELAY_TAP) else None)
        if settings.refresh + settings.refresh_delay >= settings.lease:
            raise SandbridgeError(
                f"terminal refresh {settings.refresh:g}s + delay {settings.refresh_delay:g}s "
                f"must be shorter than the lease {settings.lease:g}s"
            )
        return settings
