"""A request's state table: every (state, event) pair, allowed or refused."""

from __future__ import annotations

import itertools

import pytest

from sandbridge.exceptions import IllegalMove
from sandbridge.terminals.request_state import (
    FINISHED,
    OPEN,
    TRANSITIONS,
    USED,
    RequestEvent,
    RequestState,
    RequestStateMachine,
    next_state,
)

PENDING, APPROVED, DENIED = RequestState.PENDING, RequestState.APPROVED, RequestState.DENIED
REVOKED, ACTIVE, ENDED = RequestState.REVOKED, RequestState.ACTIVE, RequestState.ENDED
APPROVE, DENY, REVOKE = RequestEvent.APPROVE, RequestEvent.DENY, RequestEvent.REVOKE
ADMIT, END = RequestEvent.ADMIT, RequestEvent.END

# The specification, written out apart from the code's table: a new move must be added to
# both on purpose.
ALLOWED = {
    (PENDING, APPROVE): APPROVED,
    (PENDING, DENY): DENIED,
    (PENDING, REVOKE): REVOKED,
    (APPROVED, REVOKE): REVOKED,
    (APPROVED, ADMIT): ACTIVE,
    (ACTIVE, REVOKE): REVOKED,
    (ACTIVE, END): ENDED,
    (REVOKED, END): REVOKED,  # a terminal revoked while it ran ends still revoked
}
EVERY_PAIR = list(itertools.product(RequestState, RequestEvent))


def test_the_table_is_the_specification() -> None:
    assert TRANSITIONS == ALLOWED


@pytest.mark.parametrize(("state", "event"), EVERY_PAIR, ids=lambda item: item.value)
def test_every_pair_moves_to_the_tables_state_or_is_refused(
    state: RequestState, event: RequestEvent
) -> None:
    machine = RequestStateMachine(state)
    if (state, event) in ALLOWED:
        assert machine.allows(event)
        assert machine.process(event) is ALLOWED[state, event]
        assert machine.state is ALLOWED[state, event]
    else:
        assert not machine.allows(event)
        with pytest.raises(IllegalMove) as refused:
            machine.process(event)
        assert (refused.value.state, refused.value.event) == (state, event)
        assert machine.state is state  # a refused move moves nothing


def test_a_refused_move_says_what_the_request_is_and_what_was_tried() -> None:
    with pytest.raises(IllegalMove, match="a denied request cannot approve"):
        next_state(DENIED, APPROVE)


def test_a_new_request_is_pending() -> None:
    assert RequestStateMachine().state is PENDING


def test_the_states_are_the_words_the_control_socket_answers_with() -> None:
    assert [state.value for state in RequestState] == [
        "pending", "approved", "denied", "revoked", "active", "ended",
    ]  # fmt: skip
    assert f"{APPROVED}" == "approved"


def test_finished_requests_never_move_to_another_state() -> None:
    for state, event in EVERY_PAIR:
        if state in FINISHED and (state, event) in ALLOWED:
            assert ALLOWED[state, event] is state


def test_an_approval_is_used_once_only() -> None:
    for state in USED:
        assert not RequestStateMachine(state).allows(ADMIT)
    assert [state for state, event in ALLOWED if event is ADMIT] == [APPROVED]


def test_every_state_is_open_finished_or_active_and_only_one_of_them() -> None:
    groups = [OPEN, FINISHED, frozenset({ACTIVE})]
    assert sorted(itertools.chain(*groups)) == sorted(RequestState)
