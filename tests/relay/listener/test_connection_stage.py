"""A browser connection's stage table: every (stage, event) pair, allowed or refused."""

from __future__ import annotations

import itertools

import pytest

from sandbridge.exceptions import IllegalMove
from sandbridge.relay.listener.connection_stage import (
    C_KINDS,
    C_STATES,
    INITIAL,
    TASKLESS,
    TRANSITIONS,
    Event,
    Stage,
    allows,
    next_stage,
)

FRONT, WAITING, IN_FLIGHT = Stage.FRONT, Stage.WAITING, Stage.IN_FLIGHT
STREAMING, KEEP_ALIVE, TUNNEL, CLOSED = (
    Stage.STREAMING,
    Stage.KEEP_ALIVE,
    Stage.TUNNEL,
    Stage.CLOSED,
)
ADOPT, SEND_FIRST, START_TASK = Event.ADOPT, Event.SEND_FIRST, Event.START_TASK
ENTER_LANE, LEAVE_LANE, UPGRADE, CLOSE = (
    Event.ENTER_LANE,
    Event.LEAVE_LANE,
    Event.UPGRADE,
    Event.CLOSE,
)

# The specification, written out apart from the code's table: a new move must be added to
# both on purpose.
ALLOWED = {
    (FRONT, ADOPT): WAITING,
    (FRONT, SEND_FIRST): IN_FLIGHT,
    (FRONT, START_TASK): STREAMING,
    (FRONT, CLOSE): CLOSED,
    (WAITING, SEND_FIRST): IN_FLIGHT,
    (WAITING, START_TASK): STREAMING,
    (WAITING, CLOSE): CLOSED,
    (IN_FLIGHT, START_TASK): STREAMING,
    (IN_FLIGHT, CLOSE): CLOSED,
    (STREAMING, ENTER_LANE): KEEP_ALIVE,
    (STREAMING, UPGRADE): TUNNEL,
    (STREAMING, CLOSE): CLOSED,
    (KEEP_ALIVE, LEAVE_LANE): STREAMING,
    (KEEP_ALIVE, CLOSE): CLOSED,
    (TUNNEL, CLOSE): CLOSED,
}
EVERY_PAIR = list(itertools.product(Stage, Event))


def test_the_table_is_the_specification() -> None:
    assert TRANSITIONS == ALLOWED


@pytest.mark.parametrize(("stage", "event"), EVERY_PAIR, ids=lambda item: item.name)
def test_every_pair_moves_to_the_tables_stage_or_is_refused(stage: Stage, event: Event) -> None:
    if (stage, event) in ALLOWED:
        assert allows(stage, event)
        assert next_stage(stage, event) is ALLOWED[stage, event]
    else:
        assert not allows(stage, event)
        with pytest.raises(IllegalMove) as refused:
            next_stage(stage, event)
        assert (refused.value.state, refused.value.event) == (stage, event)


def test_a_refused_move_says_what_the_connection_is_and_what_was_tried() -> None:
    with pytest.raises(IllegalMove) as refused:
        next_stage(WAITING, UPGRADE)
    assert str(refused.value) == "a waiting connection cannot upgrade"
    with pytest.raises(IllegalMove) as refused:
        next_stage(IN_FLIGHT, ENTER_LANE)
    assert str(refused.value) == "an in-flight connection cannot enter the lane"


def test_every_open_stage_may_close_and_nothing_leaves_closed() -> None:
    for stage in Stage:
        if stage is not CLOSED:
            assert next_stage(stage, CLOSE) is CLOSED
    assert not any(allows(CLOSED, event) for event in Event)


def test_every_stage_is_reached_from_where_connections_start() -> None:
    reached, frontier = set(INITIAL), list(INITIAL)
    while frontier:
        stage = frontier.pop()
        for (source, _), target in ALLOWED.items():
            if source is stage and target not in reached:
                reached.add(target)
                frontier.append(target)
    assert reached == set(Stage)


def test_no_connection_goes_back_to_the_front_or_to_a_doorstep() -> None:
    later = {target for (source, _), target in ALLOWED.items() if source not in INITIAL}
    assert not later & {FRONT, WAITING, IN_FLIGHT}


def test_only_the_task_reaches_the_lane_or_a_tunnel() -> None:
    for (source, _), target in ALLOWED.items():
        if target in (KEEP_ALIVE, TUNNEL):
            assert source is STREAMING


def test_the_taskless_stages_are_those_before_the_task_starts() -> None:
    assert {source for (source, event) in ALLOWED if event is START_TASK} == TASKLESS


def test_every_c_state_stands_for_a_stage_before_or_beside_the_task() -> None:
    assert C_STATES[0] is None  # a free slot
    assert set(C_STATES.values()) - {None} == {WAITING, IN_FLIGHT, KEEP_ALIVE}


def test_every_handoff_kind_leaves_the_front_by_moves_the_table_has() -> None:
    for events in C_KINDS.values():
        assert CLOSE in events
        assert all(allows(FRONT, event) for event in events)
    assert set().union(*C_KINDS.values()) == {e for (s, e) in ALLOWED if s is FRONT}
