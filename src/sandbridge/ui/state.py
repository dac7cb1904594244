"""What the dashboard shows and does, read from and sent to the running sessions.

Until the daemon serves every session, the dashboard reads what the owner's commands read:
the registry of running sessions (``places/registry.py``) and each session's host-only
control socket (``terminals/control.py``). These calls block; the server runs them in a
thread. Every text here came from a session and is shown by the page as text only.
"""

from __future__ import annotations

import time
from typing import Any

from sandbridge import log
from sandbridge.exceptions import ControlError, KeyFileError, SandbridgeError, SessionError
from sandbridge.places.registry import SessionRecord, list_sessions, validate_name
from sandbridge.terminals import keys
from sandbridge.terminals.config_dir import config_dir
from sandbridge.terminals.control import call, split_request_id
from sandbridge.terminals.owner_approval import approve_request

# Sessions the page lists: a user runs a handful; a flood of them is cut, not rendered.
MAX_SESSIONS = 64
# The longest approval the page may sign (the CLI's --ttl has no cap; a page click gets
# a day at most), and the shortest.
MAX_TTL = 24 * 3600.0
MIN_TTL = 1.0
EGRESS_SCOPES = ("once", "session")


def _ask(session: str, message: dict[str, Any], key: str | None) -> Any:
    """One control call's field ``key`` (None: its whole answer), or None if the session
    cannot answer it (a session without terminals has no control socket)."""
    try:
        answer = call(session, message)
    except SandbridgeError:
        return None
    return answer if key is None else answer.get(key)


def _names() -> tuple[str | None, dict[str, str]]:
    """The owner's public key (None before its first use: reading the page never makes
    one) and the names of listed requesters."""
    try:
        names = keys.requester_names()
        if not (config_dir() / keys.OWNER_KEY).exists():
            return None, names
        return keys.public_hex(keys.owner_public_key()), names
    except KeyFileError:
        return None, {}


def snapshot() -> dict[str, Any]:
    """The four tables: sessions, apps, terminal requests, egress (and pending asks)."""
    owner, names = _names()
    tables: dict[str, list[dict[str, Any]]] = {
        "sessions": [], "apps": [], "terminals": [], "egress": [], "egress_pending": [],
    }  # fmt: skip
    for record in list_sessions()[:MAX_SESSIONS]:
        try:
            _add_session(tables, record, owner, names)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # An answer not shaped as ours (a session of another sandbridge version):
            # that session's rows are left out, the others shown.
            log.warning("ui.session_unreadable", session=record.id, error=type(exc).__name__)
    return tables


def _add_session(
    tables: dict[str, list[dict[str, Any]]],
    record: SessionRecord,
    owner: str | None,
    names: dict[str, str],
) -> None:
    """One session's rows in each table (the rows of other tables are added only once
    every answer of this session was read)."""
    info = _ask(record.id, {"op": "session_info"}, None)
    destinations = list(_ask(record.id, {"op": "egress_summary"}, "destinations") or [])
    requests = list(_ask(record.id, {"op": "list"}, "requests") or [])
    pending = list(_ask(record.id, {"op": "egress_pending"}, "requests") or [])
    counts = {"allowed": 0, "refused": 0}
    for row in destinations:
        counts[row["decision"]] += int(row["count"])
    session = {
        "id": record.id, "workdir": record.workdir,
        "command": None if info is None else " ".join(str(p) for p in info["command"]),
        "uptime": round(max(0.0, time.time() - record.started)),
        "network": None if info is None else str(info["network"]),
        "egress": counts, "controllable": info is not None,
    }  # fmt: skip
    terminals = []
    for request in requests:
        requester = str(request["requester"])
        name = "owner (you)" if requester == owner else names.get(requester)
        terminals.append({**request, "session": record.id, "name": name})
    tables["sessions"].append(session)
    tables["apps"] += [
        {
            "session": record.id, "port": app.port, "process": app.process, "url": app.url,
            "host_port": app.host_port, "private": app.private,
        }
        for app in record.apps
    ]  # fmt: skip
    tables["terminals"] += terminals
    tables["egress"] += [{**row, "session": record.id} for row in destinations]
    tables["egress_pending"] += [{**ask, "session": record.id} for ask in pending]


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise SandbridgeError(f"{name} must be a non-empty string, got {value!r}")
    return value


def act(body: dict[str, Any]) -> dict[str, Any]:
    """Carry out one action of the page; raise SandbridgeError (ControlError) if refused."""
    action = body.get("action")
    if action == "stop":
        return call(validate_name(_text(body, "session"), "session"), {"op": "stop"})
    if action == "app_close":
        port = body.get("host_port")
        if type(port) is not int:
            raise SandbridgeError(f"host_port must be a port number, got {port!r}")
        session = validate_name(_text(body, "session"), "session")
        return call(session, {"op": "app_close", "host_port": port})
    if action == "terminal_approve":
        ttl = body.get("ttl")
        if (
            not isinstance(ttl, int | float)
            or isinstance(ttl, bool)
            or not MIN_TTL <= ttl <= MAX_TTL
        ):
            raise SandbridgeError(f"ttl must be {MIN_TTL:g} to {MAX_TTL:g} seconds, got {ttl!r}")
        return approve_request(_text(body, "id"), float(ttl))
    if action in ("terminal_deny", "terminal_revoke"):
        request_id = _text(body, "id")
        op = "deny" if action == "terminal_deny" else "revoke"
        return call(split_request_id(request_id), {"op": op, "id": request_id})
    if action in ("egress_approve", "egress_deny"):
        session = validate_name(_text(body, "session"), "session")
        message: dict[str, Any] = {"op": action, "id": _text(body, "id")}
        if action == "egress_approve":
            scope = body.get("scope")
            if scope not in EGRESS_SCOPES:
                raise SandbridgeError(f"scope must be once or session, got {scope!r}")
            message |= {"scope": scope, "save": body.get("save") is True}
        return call(session, message)
    raise SandbridgeError(f"unknown action {str(action)[:40]!r}")


__all__ = ["ControlError", "SessionError", "act", "snapshot"]
