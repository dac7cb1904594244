"""Whether a clipboard read may go ahead now, or the owner must be asked (pure).

A yes opens a window of ``window`` seconds in which every read is allowed; once it has
passed, the next read asks again. Preapproved (``--clipboard-preapprove``): reads never
ask. Times are the caller's monotonic clock.
"""

from __future__ import annotations

import enum


class ReadDecision(enum.Enum):
    """What to do with one read."""

    ALLOW = "allow"
    ASK = "ask"


class ReadApproval:
    """The read window of one session."""

    def __init__(self, window: float, preapproved: bool = False) -> None:
        self.window = window
        self.preapproved = preapproved
        self._until: float | None = None

    def decide(self, now: float) -> ReadDecision:
        """Allow a read within an open window (or preapproved), else ask."""
        if self.preapproved or (self._until is not None and now < self._until):
            return ReadDecision.ALLOW
        return ReadDecision.ASK

    def approve(self, now: float) -> None:
        """The owner said yes at ``now``: reads are allowed for the window."""
        self._until = now + self.window

    def remaining(self, now: float) -> float:
        """Seconds left of the open window (0: closed)."""
        return 0.0 if self._until is None else max(0.0, self._until - now)
