"""What ``serve-stdio`` tells the laptop of each session, for the owner's dashboard.

Each running session of this user (the registry, as ``sandbridge ls`` reads it) is
described by its registry facts (workdir, start), its ``session_info`` (command and
network mode, asked once per session: they do not change) and its broker's ``list`` of
terminal requests, asked over the session's host-only control socket as the far
owner's own ``sandbridge terminal list`` asks it. The description travels in the APPS
list (``protocol/far_sessions.py``), cut to the bounds the laptop holds it to. These
calls block: the caller runs :meth:`SessionDescriber.describe` in a thread.
"""

from __future__ import annotations

from typing import Any

from sandbridge import log
from sandbridge.exceptions import SandbridgeError
from sandbridge.places.registry import list_sessions
from sandbridge.protocol.far_sessions import MAX_FAR_SESSIONS, FarSession, far_session
from sandbridge.terminals.control import call


def _ask(session: str, op: str) -> dict[str, Any] | None:
    """``op``'s answer, or None if the session cannot give it (no control socket: a
    session that serves no terminals; an op it does not know)."""
    try:
        return call(session, {"op": op})
    except SandbridgeError:
        return None


class SessionDescriber:
    """Describes this user's running sessions; remembers each one's ``session_info``."""

    def __init__(self) -> None:
        self._infos: dict[str, dict[str, Any] | None] = {}

    def describe(self) -> tuple[FarSession, ...]:
        """The oldest :data:`MAX_FAR_SESSIONS` running sessions, described."""
        described = []
        records = list_sessions()[:MAX_FAR_SESSIONS]
        self._infos = {r.id: self._infos[r.id] for r in records if r.id in self._infos}
        for record in records:
            if record.id not in self._infos:
                self._infos[record.id] = _ask(record.id, "session_info")
            listing = _ask(record.id, "list") or {}
            try:
                described.append(
                    far_session(
                        record.id, record.workdir, record.started, self._infos[record.id],
                        list(listing.get("requests") or []),
                    )
                )  # fmt: skip
            except (KeyError, TypeError, ValueError) as exc:  # an answer not shaped as ours
                log.warning("remote.session_unreadable", session=record.id, error=repr(exc))
        return tuple(described)
