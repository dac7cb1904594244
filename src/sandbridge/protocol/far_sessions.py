"""What a far machine says of its sessions: the facts the owner's dashboard shows.

``serve-stdio`` adds an ``"info"`` object to a session of its APPS list
(``remote_wire.py``): the session's workdir, command, start time and network mode, and
its terminal requests (id, state, requester key, reason, duration asked, approval
expiry). ``connect`` on the laptop records it for the dashboard (``places/remotes.py``),
which lists the far sessions and their requests beside the local ones. An older laptop
ignores the key; an older far side sends none, and its sessions show by their apps only.

Hostile peer: everything in it is the far machine's word. It is shown, never obeyed:
text is bounded (and shown by the page as text), numbers must be finite and within a
plausible range, counts are bounded, a request's id must belong to the session it is
listed under (``SESSION:XXXXXXXX``), a requester must be a public key. Anything else
raises :class:`~sandbridge.exceptions.RemoteWireError` naming the value, and the link is
dropped as for any malformed frame. :func:`far_session` applies the same bounds to what
an honest far side sends (it cuts, it never sends what the laptop refuses).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from sandbridge.exceptions import RemoteWireError
from sandbridge.protocol.contract import is_session_name

# Sessions described in one list: the dashboard shows 64 local sessions at most, and a
# far machine gets the same room.
MAX_FAR_SESSIONS = 64
# Requests listed per far session: the open ones first (pending, approved, active), the
# page's to answer; a session holds at most 64 open ones, which nobody answers by eye.
MAX_FAR_REQUESTS = 16
# A workdir is a path (PATH_MAX); a command is shown on one line of a table.
MAX_WORKDIR_CHARS = 4096
MAX_COMMAND_CHARS = 1024
# A request's reason: the requester's --reason (terminals/approval.py's MAX_REASON).
MAX_REASON_CHARS = 200
# Times are Unix seconds; anything past this (the year 2286) is not a clock's.
MAX_TIME = 1e10
# A duration asked: at most a day, as an approval's ttl (terminals/approval.py).
MAX_DURATION = 24 * 3600.0
NETWORK_MODES = frozenset({"none", "allow", "full"})
# A request's states (terminals/request_state.py's RequestState), and the open ones.
REQUEST_STATES = ("pending", "approved", "active", "denied", "revoked", "ended")
OPEN_STATES = frozenset({"pending", "approved", "active"})
_KEY = re.compile(r"[0-9a-f]{64}")
_TOKEN = re.compile(r"[0-9a-f]{8}")


@dataclass(frozen=True, slots=True)
class FarRequest:
    """One terminal request of a far session, as its broker lists it."""

    id: str  # SESSION:XXXXXXXX, as the far session knows it
    state: str
    requester: str
    reason: str
    created: float
    duration: float | None
    expires: float | None


@dataclass(frozen=True, slots=True)
class FarSession:
    """One far session as the far machine describes it."""

    id: str
    workdir: str
    command: str | None
    started: float
    network: str | None
    requests: tuple[FarRequest, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The wire form: the session's id and its ``info`` (as :func:`parse` reads)."""
        return {
            "id": self.id, "workdir": self.workdir, "command": self.command,
            "started": self.started, "network": self.network,
            "requests": [
                {
                    "id": r.id, "state": r.state, "requester": r.requester, "reason": r.reason,
                    "created": r.created, "duration": r.duration, "expires": r.expires,
                }
                for r in self.requests
            ],
        }  # fmt: skip


def _refuse(session: str, what: str, value: object) -> RemoteWireError:
    return RemoteWireError(f"session {session!r}: {what}, got {value!r:.80}")


def _text(session: str, info: dict[str, Any], name: str, limit: int, optional: bool) -> Any:
    value = info.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise _refuse(session, f"{name} must be text of at most {limit} characters", value)
    return value


def _optional_number(session: str, info: dict[str, Any], name: str, high: float) -> float | None:
    """A number from 0 to ``high`` (finite: no NaN nor infinity; not a boolean), or None."""
    value = info.get(name)
    if value is None:
        return None
    return _number(session, info, name, high)


def _number(session: str, info: dict[str, Any], name: str, high: float) -> float:
    """A number from 0 to ``high``: finite (no NaN nor infinity), not a boolean."""
    value = info.get(name)
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not 0 <= value <= high
    ):
        raise _refuse(session, f"{name} must be a number from 0 to {high:g}", value)
    return float(value)


def _request(session: str, raw: object) -> FarRequest:
    if not isinstance(raw, dict):
        raise _refuse(session, "a request must be an object", raw)
    request_id = raw.get("id")
    owner, _, token = request_id.rpartition(":") if isinstance(request_id, str) else ("", "", "")
    if owner != session or not _TOKEN.fullmatch(token):
        # A far side cannot list a request under another session (nor another machine:
        # the laptop adds the machine's name itself).
        raise _refuse(session, f"a request id must be {session}:XXXXXXXX", request_id)
    state = raw.get("state")
    if state not in REQUEST_STATES:
        raise _refuse(
            session, f"a request's state must be one of {', '.join(REQUEST_STATES)}", state
        )
    requester = raw.get("requester")
    if not isinstance(requester, str) or not _KEY.fullmatch(requester):
        raise _refuse(session, "a requester must be a public key (64 hex digits)", requester)
    reason = _text(session, raw, "reason", MAX_REASON_CHARS, optional=False)
    if not reason.isprintable():
        raise _refuse(session, "a reason must be printable", reason)
    return FarRequest(
        str(request_id),
        str(state),
        requester,
        reason,
        _number(session, raw, "created", MAX_TIME),
        _optional_number(session, raw, "duration", MAX_DURATION),
        _optional_number(session, raw, "expires", MAX_TIME),
    )


def parse(session: str, info: object) -> FarSession:
    """A far session's ``info`` object; RemoteWireError naming what is wrong."""
    if not isinstance(info, dict):
        raise _refuse(session, "info must be an object", info)
    network = info.get("network")
    if network is not None and network not in NETWORK_MODES:
        raise _refuse(session, "network must be none, allow or full", network)
    requests = info.get("requests", [])
    if not isinstance(requests, list) or len(requests) > MAX_FAR_REQUESTS:
        raise _refuse(session, f"requests must be a list of at most {MAX_FAR_REQUESTS}", requests)
    return FarSession(
        session,
        _text(session, info, "workdir", MAX_WORKDIR_CHARS, optional=False),
        _text(session, info, "command", MAX_COMMAND_CHARS, optional=True),
        _number(session, info, "started", MAX_TIME),
        network,
        tuple(_request(session, raw) for raw in requests),
    )


def parse_sessions(raw: object) -> tuple[FarSession, ...]:
    """A list of sessions in wire form (each its ``id`` beside its info), as a machine
    record keeps them; RemoteWireError naming what is wrong."""
    if not isinstance(raw, list) or len(raw) > MAX_FAR_SESSIONS:
        raise RemoteWireError(f"far sessions must be a list of at most {MAX_FAR_SESSIONS}")
    sessions = []
    for item in raw:
        name = item.get("id") if isinstance(item, dict) else None
        if not isinstance(name, str) or not is_session_name(name):
            raise RemoteWireError(f"a far session's id must be a session name, got {name!r:.80}")
        sessions.append(parse(name, item))
    return tuple(sessions)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def far_session(
    session: str,
    workdir: str,
    started: float,
    info: dict[str, Any] | None,
    requests: list[dict[str, Any]],
) -> FarSession:
    """What an honest far side says of ``session``: its registry facts, its
    ``session_info`` answer (None: not known) and its broker's listing, cut to the
    bounds :func:`parse` holds it to (the open requests first, then the newest)."""
    command = None
    network = None
    if info is not None:
        argv = info.get("command")
        if isinstance(argv, list) and argv:
            command = _cut(" ".join(str(part) for part in argv), MAX_COMMAND_CHARS)
        if info.get("network") in NETWORK_MODES:
            network = str(info["network"])
    ordered = sorted(
        requests,
        key=lambda r: (r.get("state") not in OPEN_STATES, -float(r.get("created") or 0)),
    )
    listed = tuple(
        FarRequest(
            str(r["id"]), str(r["state"]), str(r["requester"]),
            _cut(str(r["reason"]), MAX_REASON_CHARS), float(r["created"]),
            None if r.get("duration") is None else float(r["duration"]),
            None if r.get("expires") is None else float(r["expires"]),
        )
        for r in ordered[:MAX_FAR_REQUESTS]
    )  # fmt: skip
    return FarSession(
        session,
        _cut(workdir, MAX_WORKDIR_CHARS),
        command,
        min(max(0.0, started), MAX_TIME),
        network,
        listed,
    )
