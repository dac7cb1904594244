"""The token bucket behind the terminal's input and output rate limits."""

from __future__ import annotations

import pytest

from sandbridge.terminals.rate_limit import TokenBucket


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        # (size, now) -> delay
        ([(1000, 0.0)], [0.0]),
        ([(1000, 0.0), (500, 0.0)], [0.0, 0.5]),
        ([(1000, 0.0), (500, 0.5)], [0.0, 0.0]),
        ([(600, 0.0), (600, 0.0), (600, 0.2)], [0.0, 0.2, 0.0]),
        ([(5000, 0.0), (1, 0.0), (1, 4.0), (1, 5.001)], [0.0, 4.001, 0.001, 0.0]),
    ],
)
def test_delays(steps: list[tuple[int, float]], expected: list[float]) -> None:
    bucket = TokenBucket(1000, 0.0)
    assert [pytest.approx(bucket.delay(size, now)) for size, now in steps] == expected


def test_an_idle_bucket_refills_only_to_one_second() -> None:
    bucket = TokenBucket(1000, 0.0)
    assert bucket.delay(1000, 100.0) == 0.0
    assert bucket.delay(1, 100.0) > 0.0


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="0"):
        TokenBucket(0, 0.0)
