"""The sliding window behind the limits on open requests and on auto-publish's new apps."""

from __future__ import annotations

from sandbridge.protocol.limits import WindowLimit


def test_rate_limit_admits_the_limit_per_window_then_refuses_until_the_oldest_ages_out() -> None:
    limit = WindowLimit(limit=3, window=10.0)
    assert [limit.admit(t) for t in (0.0, 1.0, 2.0, 3.0, 9.9)] == [True, True, True, False, False]
    assert limit.admit(10.0)  # the request at 0.0 left the window
    assert not limit.admit(10.5)
    assert limit.admit(11.0)
