"""One terminal request as a session's broker keeps it: the signed ask, the owner's
approval once given, where the request is in its state table, and its running terminal."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbridge.terminals.request_state import (
    FINISHED,
    RequestEvent,
    RequestState,
    RequestStateMachine,
)

if TYPE_CHECKING:  # a running terminal's module is imported at the first attach (broker.py)
    from sandbridge.terminals.active_terminal import ActiveTerminal
    from sandbridge.terminals.approval import Approval, Request


@dataclass
class TerminalRequest:
    """One request and what became of it."""

    id: str
    request: Request
    machine: RequestStateMachine = field(default_factory=RequestStateMachine)
    approval_document: dict[str, str] | None = None
    approval: Approval | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    terminal: ActiveTerminal | None = None
    refusals: set[str] = field(default_factory=set)
    # The signed request as the requester sent it: kept for a restart (pending.py).
    document: object = None
    # When it was denied, revoked or ended (this host's clock): what the listing shows of
    # a finished request in place of its approval's expiry, which no longer holds.
    ended: float | None = None

    @property
    def state(self) -> RequestState:
        return self.machine.state

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state.value,
            "requester": self.request.requester,
            "reason": self.request.reason,
            "created": self.request.created,
            "duration": self.request.duration,
            "expires": None if self.approval is None else self.approval.expires,
            "ended": self.ended,
        }

    def process(self, event: RequestEvent) -> None:
        """Move along the state table (:class:`IllegalMove` if it has no such move) and
        wake whoever awaits a change."""
        before = self.state
        if self.machine.process(event) in FINISHED and self.ended is None:
            self.ended = time.time()
        if self.state is not before:
            self.changed.set()
            self.changed = asyncio.Event()
