"""The life of one terminal request as an explicit state table (sans-I/O).

Built the way h11's ``_state.py`` is: the states, the events, and one table of allowed
``(state, event) -> new state`` moves (a :class:`~sandbridge.protocol.moves.Moves`);
:class:`RequestStateMachine` moves along it and refuses anything else with
:class:`~sandbridge.exceptions.IllegalMove`, so no code path can invent a move (an
approval of a denied request, a second admission of a used one). The broker asks the
machine instead of comparing strings, and every pair is tested in
``tests/terminals/test_request_state.py``.

The states' values are the words ``list``, ``show`` and ``await`` answer with.
"""

from __future__ import annotations

import enum

from sandbridge.protocol.moves import Moves


class RequestState(enum.StrEnum):
    """Where a request is: waiting for the owner, granted, running, or finished."""

    PENDING = "pending"  # waiting for the owner's approval or denial
    APPROVED = "approved"  # the owner signed an approval; not yet used
    DENIED = "denied"
    REVOKED = "revoked"  # the owner took it back, before or during its terminal
    ACTIVE = "active"  # admitted: its nonce is reserved, its terminal starts or runs
    ENDED = "ended"


class RequestEvent(enum.Enum):
    """What can happen to a request."""

    APPROVE = "approve"  # the owner's signed approval verified
    DENY = "deny"
    REVOKE = "revoke"
    ADMIT = "admit"  # an attach passed every check and reserved the approval's nonce
    END = "end"  # the admitted terminal is over (or never became ready)


# Every allowed move; any pair not here is refused. A terminal revoked while it runs ends
# still revoked: the owner's word is what ``list`` shows and what ``attach`` answers.
TRANSITIONS: dict[tuple[RequestState, RequestEvent], RequestState] = {
    (RequestState.PENDING, RequestEvent.APPROVE): RequestState.APPROVED,
    (RequestState.PENDING, RequestEvent.DENY): RequestState.DENIED,
    (RequestState.PENDING, RequestEvent.REVOKE): RequestState.REVOKED,
    (RequestState.APPROVED, RequestEvent.REVOKE): RequestState.REVOKED,
    (RequestState.APPROVED, RequestEvent.ADMIT): RequestState.ACTIVE,
    (RequestState.ACTIVE, RequestEvent.REVOKE): RequestState.REVOKED,
    (RequestState.ACTIVE, RequestEvent.END): RequestState.ENDED,
    (RequestState.REVOKED, RequestEvent.END): RequestState.REVOKED,
}

# Requests that still wait for someone (the owner or the requester's attach): these
# count against a session's bound on open requests.
OPEN = frozenset({RequestState.PENDING, RequestState.APPROVED})
# Requests no move can take anywhere else: a session may forget them once their
# terminal (if any) has closed.
FINISHED = frozenset({RequestState.DENIED, RequestState.REVOKED, RequestState.ENDED})
# Requests whose approval was spent on a terminal: another attach is ``used``.
USED = frozenset({RequestState.ACTIVE, RequestState.ENDED})


MOVES = Moves(TRANSITIONS, what="request")
allows = MOVES.allows
next_state = MOVES.next


class RequestStateMachine:
    """One request's state; it changes only along :data:`TRANSITIONS`."""

    def __init__(self, state: RequestState = RequestState.PENDING) -> None:
        self.state = state

    def allows(self, event: RequestEvent) -> bool:
        """Whether ``event`` is a move from the current state (to check before the work
        that leads to it, such as verifying an approval)."""
        return allows(self.state, event)

    def process(self, event: RequestEvent) -> RequestState:
        """Move on ``event`` and return the new state; raise :class:`IllegalMove` (and stay)
        if the table has no such move."""
        self.state = next_state(self.state, event)
        return self.state
