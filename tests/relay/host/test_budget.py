"""The connection budget (relay/host/budget.py) alone, and with the real C front door leasing
from it: generated sequences of accepts, handoffs adopted and dropped, the relay's own
admissions and releases, hang-ups (and, on a build with fault sites, failed handoffs and
takes: ``front_faults.py``) leave every account whole after each step, the front's
leases what the budget lent, and the front's use of them within them."""

from __future__ import annotations

import os
import select
import socket
import time
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from sandbridge.relay.front import _front
from sandbridge.relay.front._front import Front, Handoff
from sandbridge.relay.host.budget import AppAccount, Budget, Handed
from sandbridge.relay.host.settings import RelaySettings, SessionScope

PER_APP, PER_SESSION = 3, 4
WAIT_SECONDS = 10.0
UNKNOWN = b"GET /unknown HTTP/1.1\r\nHost: x.localhost:1\r\n\r\n"  # never the front's


# ---- the budget without a front door --------------------------------------------------


def test_an_app_gets_at_most_its_limit_and_a_release_frees_a_place() -> None:
    budget = Budget(per_app=2, per_session=5)
    app = budget.open()
    assert app.admit() and app.admit()
    assert not app.admit()
    app.release()
    assert app.admit()
    budget.check()


def test_the_session_limit_counts_every_app_together() -> None:
    budget = Budget(per_app=2, per_session=3)
    first, second = budget.open(), budget.open()
    assert first.admit() and first.admit() and second.admit()
    assert not second.admit()
    first.release()
    assert second.admit()
    assert (budget.session.held, budget.session.free) == (3, 0)
    budget.check()


def test_a_session_scope_has_one_budget_sized_by_its_settings() -> None:
    scope = SessionScope(RelaySettings(max_connections_per_app=7, max_connections=9))
    assert (scope.budget.per_app, scope.budget.session.limit) == (7, 9)


# ---- the budget leasing to the real front door ----------------------------------------


class Door:
    """A bare front (no event loop) as the budget's lessee: what FrontDoor does."""

    def __init__(self, native: Front) -> None:
        self.native = native

    def lease(self, key: int, lid: int, room: int, session_room: int) -> None:
        self.native.lease(key, lid, room, session_room)

    def give_back(self, key: int, lid: int) -> bool:
        return self.native.give_back(key, lid)

    def adopted(self, handoff: Handed, *, kept: bool) -> bool:
        return handoff.counted and self.native.adopted(handoff.listener, handoff.generation, kept)


def wait_until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` (the front's counts change on its own thread: no event says so)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


class World:
    """A session of two apps: ``served`` by the front door, ``other`` not."""

    def __init__(self) -> None:
        self.native = Front(owner=os.getuid())
        self.scope = SessionScope(
            RelaySettings(max_connections_per_app=PER_APP, max_connections=PER_SESSION)
        )
        self.budget = self.scope.budget
        self.served, self.other = self.budget.open(), self.budget.open()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.listener.setblocking(False)
        self.lid = self.native.add_listener(
            fd=self.listener.fileno(),
            port=self.listener.getsockname()[1],
            base_path=b"/",
            pool_size=0,
            pool_idle=1.0,
            keepalive=60.0,
            grace=60.0,
            room=0,
            scope=self.budget.key,
            scope_room=self.budget.session.leased,
        )
        self.served.served(Door(self.native), self.lid)
        self.waiting: list[socket.socket] = []  # held by the front, no request yet
        self.counted: list[tuple[AppAccount, socket.socket | None]] = []  # the relay's

    def close(self) -> None:
        for waiting in self.waiting:
            waiting.close()
        for _, counted in self.counted:
            if counted is not None:
                counted.close()
        self.listener.close()
        self.native.close()

    def check(self) -> None:
        """Every account whole; the front's leases the budget's; its use within them."""
        self.budget.check()
        held = self.native.held(self.lid)
        assert (held.room, held.scope_room) == (
            self.served.account.leased,
            self.budget.session.leased,
        )
        assert held.held == held.scope_held == len(self.waiting)
        assert held.held <= held.room and held.scope_held <= held.scope_room
        for account in (self.served, self.other):
            assert account.account.held == sum(a is account for a, _ in self.counted)

    def front_held(self) -> int:
        return self.native.held(self.lid).held

    def handoff(self) -> Handoff:
        assert select.select([self.native.fileno()], [], [], WAIT_SECONDS)[0]
        [handoff] = self.native.take()
        return handoff

    # the steps ------------------------------------------------------------------------

    def connect(self) -> None:
        """A browser connects: the front holds it within its leases, else hands it over
        uncounted and the relay admits it if the budget has a place."""
        held = self.native.held(self.lid)
        fits = held.held < held.room and held.scope_held < held.scope_room
        sock = socket.create_connection(self.listener.getsockname(), timeout=WAIT_SECONDS)
        if fits:
            wait_until(lambda: self.front_held() == held.held + 1)
            self.waiting.append(sock)
            return
        handoff = self.handoff()
        assert handoff.checked and not handoff.counted
        os.close(handoff.browser_fd)
        if self.served.admit():
            self.counted.append((self.served, sock))
        else:
            sock.close()

    def hand_over(self, *, kept: bool) -> None:
        """A held browser sends what the front cannot relay: handed over counted, then
        adopted (``kept``) or closed by the relay."""
        if not self.waiting:
            return
        sock = self.waiting.pop()
        sock.sendall(UNKNOWN)
        handoff = self.handoff()
        assert handoff.counted
        os.close(handoff.browser_fd)
        if kept:
            assert self.served.adopt(handoff)
            self.counted.append((self.served, sock))
        else:
            self.served.drop(handoff)
            sock.close()

    def admit(self, account: AppAccount) -> None:
        """The relay accepts a connection itself (an event-loop listener)."""
        if account.admit():
            self.counted.append((account, None))

    def release(self) -> None:
        if self.counted:
            account, sock = self.counted.pop(0)
            if sock is not None:
                sock.close()
            account.release()

    def hang_up(self) -> None:
        """A browser the front holds leaves."""
        if self.waiting:
            before = self.front_held()
            self.waiting.pop(0).close()
            wait_until(lambda: self.front_held() == before - 1)

    def fail_handoff(self) -> None:
        """The handoff of a held browser finds no memory: closed, its place back."""
        if self.waiting:
            before = self.front_held()
            _front._fail_next("handoff")
            sock = self.waiting.pop()
            sock.sendall(UNKNOWN)
            wait_until(lambda: self.front_held() == before - 1)
            sock.close()

    def fail_take(self) -> None:
        """take() cannot give Python a counted handoff: closed, its place back."""
        if self.waiting:
            sock = self.waiting.pop()
            sock.sendall(UNKNOWN)
            assert select.select([self.native.fileno()], [], [], WAIT_SECONDS)[0]
            _front._fail_next("take")
            try:
                self.native.take()
            except MemoryError:
                pass
            else:
                raise AssertionError("take() did not fail")
            sock.close()

    def end(self) -> None:
        """Everything closes: the front is lent the whole budget, then nothing."""
        while self.counted:
            self.release()
        while self.waiting:
            self.hang_up()
        self.check()
        assert (self.served.account.leased, self.budget.session.leased) == (PER_APP, PER_SESSION)
        self.native.remove_listener(self.lid)
        self.served.unserved()
        self.budget.check()
        assert self.budget.session.free == PER_SESSION


STEPS: dict[str, Callable[[World], None]] = {
    "connect": World.connect,
    "adopted": lambda world: world.hand_over(kept=True),
    "dropped": lambda world: world.hand_over(kept=False),
    "admit_served": lambda world: world.admit(world.served),
    "admit_other": lambda world: world.admit(world.other),
    "release": World.release,
    "hang_up": World.hang_up,
}
FAULT_STEPS: dict[str, Callable[[World], None]] = {
    "fail_handoff": World.fail_handoff,
    "fail_take": World.fail_take,
}


def run_steps(names: list[str]) -> None:
    """Run the steps named on a new world, checking it whole after each."""
    world = World()
    try:
        world.check()
        for name in names:
            {**STEPS, **FAULT_STEPS}[name](world)
            world.check()
        world.end()
    finally:
        world.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(sorted(STEPS)), max_size=24))
def test_the_budget_is_whole_after_every_step_with_the_front_leasing(names: list[str]) -> None:
    run_steps(names)


def test_the_front_takes_no_connection_past_its_lease_and_the_relay_none_past_the_rest() -> None:
    run_steps(["connect"] * (PER_APP + 1) + ["admit_other", "admit_other", "admit_served"])
