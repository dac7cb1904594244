"""The signed terminal requests a session took, so that a copy of one is refused.

Threat: a signed request (``terminals/approval.py``) names its session instance, its
requester, a time and a nonce, and was good for as long as the instance lived: whoever
saw it cross (a far ``serve-stdio``, a ``connect`` relaying it) could send it again and
again, each copy a new pending request in the requester's name for the owner to answer.

Defence: :class:`TakenRequests` (pure: the time is an argument) refuses a request not
signed within the clock skew of now (``expired``), and a copy of one taken (``used``),
whose nonce it keeps until a copy would be refused as expired anyway. It is per
session instance, the only place a request is good for: the reservation journal that
spends approvals and signed answers is the user's, shared by every session, and an
allowed requester asking in a loop would fill it for all of them. At its bound it
refuses new requests (``too_many``) rather than forget a nonce still live.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from sandbridge.exceptions import ControlRefusal
from sandbridge.terminals.settings import MAX_CLOCK_SKEW

if TYPE_CHECKING:  # the signatures' modules are the broker's first request's (broker.py)
    from sandbridge.terminals.approval import Request

# Requests one session takes within one clock skew (5 minutes): four times as many as it
# remembers in all (broker.MAX_STORED_REQUESTS, 256), a few KiB of nonces.
MAX_TAKEN = 1024


class TakenRequests:
    """Nonces of the requests taken, each with the time until which a copy is refused."""

    def __init__(self, taken: Iterable[tuple[str, float]] = ()) -> None:
        self._until = dict(list(taken)[:MAX_TAKEN])

    def take(self, request: Request, now: float) -> None:
        """Take ``request`` once, or raise :class:`ControlRefusal` (``expired``, ``used``,
        ``too_many``) naming why."""
        away = abs(request.created - now)
        if away > MAX_CLOCK_SKEW:
            raise ControlRefusal(
                "expired",
                f"the request was signed {away:.0f}s away from this machine's clock (more "
                f"than {MAX_CLOCK_SKEW:g}s): check the requester's clock and ask again",
            )
        self._until = {nonce: until for nonce, until in self._until.items() if until >= now}
        if request.nonce in self._until:
            raise ControlRefusal("used", "this request was already taken; a copy is refused")
        if len(self._until) >= MAX_TAKEN:
            raise ControlRefusal(
                "too_many", f"{MAX_TAKEN} requests within {MAX_CLOCK_SKEW:g}s: ask again later"
            )
        self._until[request.nonce] = request.created + MAX_CLOCK_SKEW

    def items(self) -> tuple[tuple[str, float], ...]:
        """What a restarted broker needs to go on refusing the copies."""
        return tuple(self._until.items())
