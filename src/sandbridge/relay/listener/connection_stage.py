"""The life of one browser connection as an explicit stage table (sans-I/O).

Built as :mod:`sandbridge.terminals.request_state` is (h11's ``_state.py``): the stages,
the events, one table of allowed ``(stage, event) -> new stage`` moves (a
:class:`~sandbridge.protocol.moves.Moves`), and :func:`next_stage`, which refuses anything
else with :class:`~sandbridge.exceptions.IllegalMove`. A connection passes through several
executors (the C front door's thread, the event loop's read callbacks on a doorstep or in
the lane, the connection's task, a tunnel); this table is what they agree on, and
:class:`~sandbridge.relay.listener.connection.Connection` moves along it.
Every pair is tested in ``tests/relay/listener/test_connection_stage.py``.

A connection starts in :attr:`Stage.FRONT` (the C front door accepted it) or
:attr:`Stage.WAITING` (the event loop accepted it, the owner's and within the limits).
The C thread keeps its own states for what it holds; :data:`C_STATES` says which stage
each stands for, and the handoff's kind (:data:`C_KINDS`) which events may take the
connection out of :attr:`Stage.FRONT` (docs/relay.md, "A connection's stages").
"""

from __future__ import annotations

import enum

from sandbridge.protocol.moves import Moves


class Stage(enum.StrEnum):
    """Where a browser connection is, and who holds it."""

    FRONT = "front"  # the C front door's thread holds it (its own state: C_STATES)
    WAITING = "waiting"  # counted, no task: waits on the doorstep for its first bytes
    IN_FLIGHT = "in-flight"  # its first request went out from a callback; no task yet
    STREAMING = "streaming"  # its task relays: a head, a body, a response over reads
    KEEP_ALIVE = "keep-alive"  # between requests: the lane relays from the read callbacks
    TUNNEL = "tunnel"  # after a 101: bytes copied both ways, untouched (relay/listener/tunnel.py)
    CLOSED = "closed"  # closed, or handed nowhere; it counts no more


class Event(enum.Enum):
    """What can happen to a browser connection."""

    ADOPT = "be adopted"  # the front hands it over with nothing read (or nothing whole)
    SEND_FIRST = "send a first request"  # it went to a parked app connection unawaited
    START_TASK = "start its task"  # its task takes it from here
    ENTER_LANE = "enter the lane"  # the task waits for its next request in the lane
    LEAVE_LANE = "leave the lane"  # the lane gives it back to its task
    UPGRADE = "upgrade"  # a 101 answered its upgrade: a tunnel owns it
    CLOSE = "close"  # refused, timed out, ended, or its listener closed


S, E = Stage, Event
# Every allowed move; any pair not here is refused. Every open stage may close; nothing
# leaves CLOSED. Only the task reaches the lane or a tunnel.
TRANSITIONS: dict[tuple[Stage, Event], Stage] = {
    (S.FRONT, E.ADOPT): S.WAITING,
    (S.FRONT, E.SEND_FIRST): S.IN_FLIGHT,  # the front's SENT handoff, or its bytes sent here
    (S.FRONT, E.START_TASK): S.STREAMING,
    (S.FRONT, E.CLOSE): S.CLOSED,
    (S.WAITING, E.SEND_FIRST): S.IN_FLIGHT,
    (S.WAITING, E.START_TASK): S.STREAMING,
    (S.WAITING, E.CLOSE): S.CLOSED,
    (S.IN_FLIGHT, E.START_TASK): S.STREAMING,  # its response relayed, given up, or more bytes
    (S.IN_FLIGHT, E.CLOSE): S.CLOSED,
    (S.STREAMING, E.ENTER_LANE): S.KEEP_ALIVE,
    (S.STREAMING, E.UPGRADE): S.TUNNEL,
    (S.STREAMING, E.CLOSE): S.CLOSED,
    (S.KEEP_ALIVE, E.LEAVE_LANE): S.STREAMING,
    (S.KEEP_ALIVE, E.CLOSE): S.CLOSED,
    (S.TUNNEL, E.CLOSE): S.CLOSED,
}
del S, E

# Where a connection starts.
INITIAL = frozenset({Stage.FRONT, Stage.WAITING})
# Stages in which no task exists for the connection: the listener's close drops these
# itself (a task's own end closes the others).
TASKLESS = frozenset({Stage.FRONT, Stage.WAITING, Stage.IN_FLIGHT})

# The C thread's connection states (_front_thread.h: FREE, FIRST, AWAIT, IDLE, WAIT), here so
# that the relay reads them without importing the C (tests/relay/front/test_front.py checks the
# two agree), and the stage each stands for while the front holds the connection.
C_FREE, C_FIRST, C_AWAIT, C_IDLE, C_WAIT = 0, 1, 2, 3, 4
C_STATES: dict[int, Stage | None] = {
    C_FREE: None,  # a free slot: no connection
    C_FIRST: Stage.WAITING,  # accepted, its first bytes not read yet
    C_AWAIT: Stage.IN_FLIGHT,  # a request relayed to an app connection, its response due
    C_IDLE: Stage.KEEP_ALIVE,  # an exchange relayed whole, the next request not read yet
    C_WAIT: Stage.IN_FLIGHT,  # a request taken, waiting for the app connection it asked for
}
# A handoff's kind: the C's KIND_* (_front_thread.h), here for the same reason. WANT carries
# no connection: it asks the relay for an app connection for a waiting request.
FRESH, SENT, RETRY, WANT = 0, 1, 2, 3
# The events that may take a connection out of FRONT with a handoff of each kind: its
# bytes decide between them (the Python relay reads them as if it had read them itself),
# and any of them may be refused (CLOSE).
C_KINDS: dict[int, frozenset[Event]] = {
    # its bytes not yet sent: none, a request not whole, or one the front does not relay
    FRESH: frozenset({Event.ADOPT, Event.SEND_FIRST, Event.START_TASK, Event.CLOSE}),
    SENT: frozenset({Event.SEND_FIRST, Event.CLOSE}),  # a request sent, its response unread
    RETRY: frozenset({Event.START_TASK, Event.CLOSE}),  # sent once; the app closed its end
}  # (WANT hands over no connection: none leaves FRONT by it)


MOVES = Moves(TRANSITIONS, what="connection")
allows = MOVES.allows
next_stage = MOVES.next
