"""The egress ops of a session without an egress gate (``net`` none or full): each one
refused, naming why. Apart from the gate's requests (``request_server.py``), which such a
session never imports.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sandbridge.exceptions import ControlRefusal

# An op on the session's control socket: the request's JSON object in, the answer's out.
OwnerOp = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
# The control-socket ops the owner's ``sandbridge egress`` commands send.
EGRESS_OPS = ("egress_pending", "egress_approve", "egress_deny")


def refuse_without_gate(session: str) -> dict[str, OwnerOp]:
    """The egress ops of a session that has no egress gate (``net`` none or full)."""

    async def refuse(message: dict[str, Any]) -> dict[str, Any]:
        raise ControlRefusal(
            "no_egress", f"session {session} has no egress proxy (its net mode is not allow)"
        )

    return dict.fromkeys(EGRESS_OPS, refuse)
