"""The owner's approval of a terminal request, signed with the owner key.

``sandbridge terminal approve`` and the dashboard both approve through
:func:`approve_request`: the request is read back from the session (``show``), rebuilt,
signed with the owner's private key, and the signed approval is sent (``approve``). The
session verifies it as it verifies any approval; nothing here is trusted by it. The
dashboard also says what it showed of the request (:class:`Shown`): an answer naming
anything else is refused before anything is signed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sandbridge.exceptions import SandbridgeError
from sandbridge.terminals import approval, keys
from sandbridge.terminals.approval import Request
from sandbridge.terminals.control import call, parse_request_id, socket_of


@dataclass(frozen=True, slots=True)
class Shown:
    """What the owner saw of a request when they chose to approve it (the dashboard's
    row): the requester's key and the duration asked (None: none asked)."""

    requester: str
    duration: float | None


def check_shown(request_id: str, shown: Shown, answer: dict[str, Any], as_asked: bool) -> None:
    """Refuse (naming both values) a ``show`` answer whose requester, or with
    ``as_asked`` whose duration asked, is not what the owner saw.

    Threat: the page lists a far request as the far machine described it, and the
    approval is signed from the far side's ``show`` at the click: a hostile far machine
    answered with another requester (its own key, or a request of another machine with
    the same session name, which the owner's signature would then open) or a longer
    duration. Defence: only what the owner saw is signed."""
    requester = str(answer["request"]["requester"])
    if requester != shown.requester:
        raise SandbridgeError(
            f"request {request_id}: its session now names requester {requester:.16}…, not "
            f"{shown.requester:.16}… as shown; nothing was signed (refresh and look again)"
        )
    asked = answer.get("duration")
    if as_asked and asked != shown.duration:
        said = "none" if shown.duration is None else f"{shown.duration:g} s"
        raise SandbridgeError(
            f"request {request_id}: its session now says it asks {asked!r:.20} s, not "
            f"{said} as shown; nothing was signed (refresh and look again)"
        )


def answer_request(request_id: str, op: str) -> dict[str, Any]:
    """Deny or revoke (``op``) ``request_id``; return its session's answer or raise
    ControlError. A far request's answer is signed with the owner key: the far machine
    takes a deny or revoke over the link only from an owner key it trusts."""
    place, far_id = parse_request_id(request_id)
    message: dict[str, Any] = {"op": op, "id": far_id}
    if place.machine is not None:
        socket_of(place)  # a machine no connect serves is refused before the key is read
        message["signed"] = approval.sign_answer(keys.owner_key(), op, far_id, time.time())
    return call(place, message)


def approve_request(
    request_id: str, ttl: float | None = None, shown: Shown | None = None
) -> dict[str, Any]:
    """Sign an approval of ``request_id`` lasting ``ttl`` seconds (None: the duration the
    request asked for, else :data:`~sandbridge.terminals.approval.DEFAULT_TTL`) and send it
    to its session; return the session's answer (``state``, ``expires``, ``ttl``) or raise
    ControlError. For a far request (``HOST:SESSION:XXXXXXXX``) the approval is signed
    here, for the far session and request id as the far side shows them; the far
    machine admits it only if it lists this owner key in its ``owners`` file."""
    place, far_id = parse_request_id(request_id)
    session = place.session
    answer = call(place, {"op": "show", "id": far_id})
    try:
        if shown is not None:
            check_shown(request_id, shown, answer, as_asked=ttl is None)
        if ttl is None:
            # The session checked the asked duration when it took the request; an answer
            # from a session that predates it has none.
            asked = answer.get("duration")
            ttl = approval.DEFAULT_TTL if asked is None else float(asked)
        body = answer["request"]
        request = Request(
            session,
            str(answer["instance"]),
            str(body["requester"]),
            str(body["reason"]),
            float(body["created"]),
            str(body["nonce"]),
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # a far side's word
        raise SandbridgeError(
            f"request {request_id}: its session's answer to show is malformed "
            f"({type(exc).__name__}: {exc!s:.80}); nothing was signed"
        ) from None
    document = approval.sign_approval(keys.owner_key(), far_id, request, ttl, time.time())
    return {**call(place, {"op": "approve", "id": far_id, "approval": document}), "ttl": ttl}
