"""The owner's approval of a terminal request, signed with the owner key.

``sandbridge terminal approve`` and the dashboard both approve through
:func:`approve_request`: the request is read back from the session (``show``), rebuilt,
signed with the owner's private key, and the signed approval is sent (``approve``). The
session verifies it as it verifies any approval; nothing here is trusted by it.
"""

from __future__ import annotations

import time
from typing import Any

from sandbridge.terminals import approval, keys
from sandbridge.terminals.approval import Request
from sandbridge.terminals.control import call, parse_request_id


def approve_request(request_id: str, ttl: float | None = None) -> dict[str, Any]:
    """Sign an approval of ``request_id`` lasting ``ttl`` seconds (None: the duration the
    request asked for, else :data:`~sandbridge.terminals.approval.DEFAULT_TTL`) and send it
    to its session; return the session's answer (``state``, ``expires``, ``ttl``) or raise
    ControlError. For a far request (``HOST:SESSION:XXXXXXXX``) the approval is signed
    here, for the far session and request id as the far side shows them; the far
    machine admits it only if it lists this owner key in its ``owners`` file."""
    place, far_id = parse_request_id(request_id)
    session = place.session
    shown = call(place, {"op": "show", "id": far_id})
    if ttl is None:
        # The session checked the asked duration when it took the request; an answer
        # from a session that predates it has none.
        asked = shown.get("duration")
        ttl = approval.DEFAULT_TTL if asked is None else float(asked)
    body = shown["request"]
    request = Request(
        session,
        str(shown["instance"]),
        str(body["requester"]),
        str(body["reason"]),
        float(body["created"]),
        str(body["nonce"]),
    )
    document = approval.sign_approval(keys.owner_key(), far_id, request, ttl, time.time())
    return {**call(place, {"op": "approve", "id": far_id, "approval": document}), "ttl": ttl}
