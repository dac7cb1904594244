"""Signed requests are taken once, within the clock skew (terminals/taken_requests.py)."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import ControlRefusal
from sandbridge.terminals.approval import Request
from sandbridge.terminals.settings import MAX_CLOCK_SKEW
from sandbridge.terminals.taken_requests import MAX_TAKEN, TakenRequests

NOW = 1_800_000_000.0


def request(nonce: str = "a" * 32, created: float = NOW) -> Request:
    return Request("web", "inst1", "k" * 64, "", created, nonce)


def refusal(taken: TakenRequests, asked: Request, now: float = NOW) -> str:
    with pytest.raises(ControlRefusal) as refused:
        taken.take(asked, now)
    return refused.value.code


def test_a_request_is_taken_once_until_a_copy_would_be_expired_anyway() -> None:
    taken = TakenRequests()
    taken.take(request(), NOW)
    assert refusal(taken, request(), NOW + MAX_CLOCK_SKEW) == "used"
    assert refusal(taken, request(), NOW + MAX_CLOCK_SKEW + 1) == "expired"
    assert taken.items() == (("a" * 32, NOW + MAX_CLOCK_SKEW),)


@pytest.mark.parametrize("away", [MAX_CLOCK_SKEW + 1, -MAX_CLOCK_SKEW - 1])
def test_a_request_signed_beyond_the_clock_skew_is_refused(away: float) -> None:
    assert refusal(TakenRequests(), request(created=NOW + away)) == "expired"


def test_past_the_bound_new_requests_are_refused_and_no_live_nonce_is_forgotten() -> None:
    taken = TakenRequests()
    for n in range(MAX_TAKEN):
        taken.take(request(f"{n:032x}"), NOW)
    assert refusal(taken, request("f" * 32)) == "too_many"
    assert refusal(taken, request(f"{0:032x}")) == "used"
    later = NOW + MAX_CLOCK_SKEW + 1  # the first ones expired: room again
    taken.take(request("f" * 32, created=later), later)


def test_a_restarted_broker_goes_on_refusing_the_copies() -> None:
    first = TakenRequests()
    first.take(request(), NOW)
    assert refusal(TakenRequests(first.items()), request(), NOW + 1) == "used"
