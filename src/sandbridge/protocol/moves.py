"""A state table: the allowed ``(state, event) -> new state`` moves, and nothing else.

The sans-I/O core of each explicit state machine in sandbridge (a terminal request's,
:mod:`sandbridge.terminals.request_state`; a browser connection's,
:mod:`sandbridge.relay.listener.connection_stage`): each declares its states, its events
and one mapping of moves, and asks this table whether a move exists or where it leads.
A pair the mapping does not name is refused with :class:`IllegalMove`, which names the
state, the event and what kind of thing was asked to move.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Generic, TypeVar

from sandbridge.exceptions import IllegalMove

State = TypeVar("State", bound=enum.Enum)
Event = TypeVar("Event", bound=enum.Enum)


class Moves(Generic[State, Event]):
    """The moves of one state table; ``what`` names what moves ("request", "connection")."""

    def __init__(self, moves: Mapping[tuple[State, Event], State], what: str) -> None:
        self.moves = moves
        self.what = what

    def allows(self, state: State, event: Event) -> bool:
        """Whether the table has a move for ``event`` from ``state``."""
        return (state, event) in self.moves

    def next(self, state: State, event: Event) -> State:
        """The state ``event`` moves ``state`` to; :class:`IllegalMove` if there is no move."""
        try:
            return self.moves[state, event]
        except KeyError:
            raise IllegalMove(state, event, what=self.what) from None
