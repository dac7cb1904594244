"""A token bucket (sans-I/O): how long to wait before ``size`` more bytes may pass."""

from __future__ import annotations


class TokenBucket:
    """``per_second`` bytes a second, with a burst of one second's worth."""

    def __init__(self, per_second: float, now: float) -> None:
        if per_second <= 0:
            raise ValueError(f"rate {per_second!r} must be positive")
        self.per_second = per_second
        self._tokens = per_second
        self._stamp = now

    def delay(self, size: int, now: float) -> float:
        """0.0 and the bytes are taken, or the seconds to wait before asking again."""
        self._tokens = min(self.per_second, self._tokens + (now - self._stamp) * self.per_second)
        self._stamp = now
        # A chunk larger than the burst passes once the bucket is full (it then owes).
        needed = min(size, self.per_second)
        if self._tokens >= needed:
            self._tokens -= size
            return 0.0
        return (needed - self._tokens) / self.per_second
