"""A session's connection budget: the one owner of every count of its connection limits.

Each app has ``--max-connections-per-app`` places and the session ``--max-connections``
for its apps together. A browser connection takes one place of its app's account and one
of the session's, from the moment it is accepted until it is closed, whoever holds it:
the relay's Python (``held``) or the C front door (:mod:`.front`), which serves new
connections on its own thread and cannot ask the event loop before each one. So the
front door works on a *lease*: every place of a served app's account, and of its
session's, that the relay does not hold is lent to the front (``leased``), which holds
connections within it and counts its own use of it. Then:

- the relay admits a connection from what is free, else asks the front to give back one
  leased place it does not use (:meth:`AppAccount.admit`); none: the limit is reached;
- a connection the front hands over counted takes its place from the lease with it
  (:meth:`AppAccount.adopt`), or gives it back to the lease if the relay drops it
  (:meth:`AppAccount.drop`);
- a connection the relay closes frees its place (:meth:`AppAccount.release`), which is
  lent again at once where the front serves.

Nothing else writes these counts: before this, four places (the listener, the session,
the C's listener and its session) were kept in step by seven calls, and two failure
paths of the C lost a place for good. For every account, ``held + leased + free ==
limit`` and none is negative (:meth:`Account.check`); the front's own use of a lease is
at most the lease (``tests/relay/host/test_budget.py`` drives sequences of every step and
checks both after each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class Handed(Protocol):
    """What the budget and the front door read of a connection the front handed over
    (the C's ``Handoff``): the budget stands below the front door and knows not its C."""

    @property
    def listener(self) -> int: ...

    @property
    def generation(self) -> int: ...

    @property
    def counted(self) -> bool: ...


class FrontDoor(Protocol):
    """The front door's side of a lease (:class:`sandbridge.relay.front.front.FrontDoor`)."""

    def lease(self, key: int, lid: int, room: int, session_room: int) -> None: ...

    def give_back(self, key: int, lid: int) -> bool: ...

    def adopted(self, handoff: Handed, *, kept: bool) -> bool: ...


@dataclass
class Account:
    """The places of one limit: held by the relay, lent to the front door, free."""

    limit: int
    held: int = 0
    leased: int = 0

    @property
    def free(self) -> int:
        return self.limit - self.held - self.leased

    def check(self) -> None:
        """Raise :class:`AssertionError` unless the account is whole."""
        assert min(self.held, self.leased, self.free) >= 0, self
        assert self.held + self.leased + self.free == self.limit, self


class Budget:
    """The connection budget of one session's apps (:class:`~.settings.SessionScope`)."""

    def __init__(self, per_app: int, per_session: int) -> None:
        self.per_app = per_app
        self.session = Account(per_session)
        self.apps: set[AppAccount] = set()
        # The front door that serves some of the apps (one per event loop: a session's
        # apps are served on one), and those apps.
        self.door: FrontDoor | None = None
        self._served: set[AppAccount] = set()

    @property
    def key(self) -> int:
        """The session's name in the front door."""
        return id(self)

    def open(self) -> AppAccount:
        """An account for a new app of the session."""
        account = AppAccount(self)
        self.apps.add(account)
        return account

    def check(self) -> None:
        """Raise :class:`AssertionError` unless every account is whole and the session's
        held places are its apps' together."""
        self.session.check()
        for account in self.apps:
            account.account.check()
        assert self.session.held == sum(a.account.held for a in self.apps), self.session
        if not self._served:
            assert self.session.leased == 0, self.session

    def _lend(self, account: AppAccount | None) -> None:
        """Lend the front every free place of the session's, and of ``account``'s if the
        front serves it; tell the front."""
        if self.door is None:
            return
        self.session.leased += self.session.free
        lid = -1
        room = 0
        if account is not None and account.lid >= 0:
            account.account.leased += account.account.free
            lid, room = account.lid, account.account.leased
        self.door.lease(self.key, lid, room, self.session.leased)


class AppAccount:
    """One app's places in its session's budget (made by :meth:`Budget.open`)."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.account = Account(budget.per_app)
        self.lid = -1  # the app's listener in the front door, if it serves it

    def served(self, door: FrontDoor, lid: int) -> None:
        """The front door serves the app as listener ``lid``: it is lent what is free."""
        budget = self.budget
        assert budget.door in (None, door), "a session's apps are served on one event loop"
        budget.door, self.lid = door, lid
        budget._served.add(self)
        budget._lend(self)

    def unserved(self) -> None:
        """The front door serves the app no more (it closed what it held of it): its
        lease is free again, and the session's too with the last such app."""
        budget = self.budget
        if self.lid < 0:
            return
        self.lid = -1
        self.account.leased = 0
        budget._served.discard(self)
        if not budget._served:
            budget.door = None
            budget.session.leased = 0

    def close(self) -> None:
        """The app is gone (its connections released first)."""
        self.unserved()
        self.budget.apps.discard(self)

    def admit(self) -> bool:
        """Count a connection the relay accepted: from the free places, else from the
        front's lease where it uses them not; ``False``: a limit is reached."""
        account, session, budget = self.account, self.budget.session, self.budget
        from_lease = self.lid >= 0 and account.free == 0
        session_from_lease = session.free == 0
        if (not from_lease and account.free == 0) or (session_from_lease and budget.door is None):
            return False
        if from_lease or session_from_lease:
            assert budget.door is not None
            # (an app the front serves has no free place while it does: both are lent)
            if not budget.door.give_back(budget.key, self.lid if from_lease else -1):
                return False
            session.leased -= 1
            if from_lease:
                account.leased -= 1
        account.held += 1
        session.held += 1
        return True

    def adopt(self, handoff: Handed) -> bool:
        """Count a connection the front door handed over counted: its place comes from
        the lease with it; if its listener is gone meanwhile, as any connection."""
        door = self.budget.door
        if door is None or not door.adopted(handoff, kept=True):
            return self.admit()
        self.account.leased -= 1
        self.budget.session.leased -= 1
        self.account.held += 1
        self.budget.session.held += 1
        return True

    def drop(self, handoff: Handed) -> None:
        """A connection the front handed over counted is closed uncounted: its place is
        the lease's again."""
        door = self.budget.door
        if door is not None:
            door.adopted(handoff, kept=False)

    def release(self) -> None:
        """A connection the relay counted is closed: its place is free, lent again."""
        self.account.held -= 1
        self.budget.session.held -= 1
        self.budget._lend(self)
