"""The state table both explicit state machines are built on (protocol/moves.py)."""

from __future__ import annotations

import enum

import pytest

from sandbridge.exceptions import IllegalMove
from sandbridge.protocol.moves import Moves


class Light(enum.Enum):
    OFF = "off"
    ON = "on"


class Press(enum.Enum):
    SWITCH_ON = "switch on"
    SWITCH_OFF = "switch off"


MOVES = Moves(
    {(Light.OFF, Press.SWITCH_ON): Light.ON, (Light.ON, Press.SWITCH_OFF): Light.OFF}, what="lamp"
)


@pytest.mark.parametrize("state", list(Light))
@pytest.mark.parametrize("event", list(Press))
def test_a_move_is_allowed_exactly_when_the_table_names_it(state: Light, event: Press) -> None:
    named = (state, event) in MOVES.moves
    assert MOVES.allows(state, event) is named
    if named:
        assert MOVES.next(state, event) is MOVES.moves[state, event]
    else:
        with pytest.raises(IllegalMove) as refused:
            MOVES.next(state, event)
        assert (refused.value.state, refused.value.event) == (state, event)


def test_a_refused_move_names_the_state_the_event_and_what_moved() -> None:
    with pytest.raises(IllegalMove, match=r"^an on lamp cannot switch on$"):
        MOVES.next(Light.ON, Press.SWITCH_ON)
