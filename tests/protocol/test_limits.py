"""The sliding window behind the limits on open requests and on auto-publish's new apps."""

from __future__ import annotations

from sandbridge.protocol.limits import WindowLimit


def test_rate_limit_admits_the_limit_per_window_then_refuses_until_the_oldest_ages_out() -> None:
    limit = WindowLimit(limit=3, window=10.0)
    assert [limit.admit(t) for t in (0.0, 1.0, 2.0, 3.0, 9.9)] == [True, True, True, False, False]
    assert limit.admit(10.0)  # the request at 0.0 left the window
    assert not limit.admit(10.5)
    assert limit.admit(11.0)


def test_a_full_window_is_never_read_as_open_at_the_float_edge() -> None:
    """Millisecond clock readings where ``first + window - now`` is 0.0 but
    ``now - first`` is still below the window: the first event stays counted, and before
    the fix the delay of 0 admitted every event after it (the paced sockets accepted 15
    connections where 5 were the limit)."""
    first, window = 35944.944, 0.2
    now = 35945.144
    assert first + window - now <= 0 < window - (now - first)  # the edge itself
    limit = WindowLimit(limit=5, window=window)
    for _ in range(5):
        assert limit.admit(first)
    assert limit.delay(now) > 0
    assert [limit.admit(now) for _ in range(10)] == [False] * 10
    assert limit.admit(now + 0.001)  # once the first events have aged out for real
