"""What the dashboard shows and does, read from and sent to the running sessions.

The dashboard lists the registry of running sessions (``places/registry.py``). A session
the dashboard's host serves itself (the daemon's) comes with its answers read in-process
(:class:`Answers`); any other is asked over its host-only control socket
(``terminals/control.py``), as the owner's commands ask it. These calls block; the
server runs them in a thread. Every text here came from a session and is shown by the
page as text only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sandbridge import log
from sandbridge.clipboard import read_log
from sandbridge.containers import decision_log
from sandbridge.exceptions import (
    ControlError,
    ControlTimeout,
    KeyFileError,
    SandbridgeError,
    SessionError,
)
from sandbridge.places.registry import (
    AppRecord,
    SessionRecord,
    list_sessions,
    session_path,
    validate_name,
)
from sandbridge.places.remotes import RemoteRecord, list_remotes
from sandbridge.shown_text import shown
from sandbridge.ssh_agent.signature_log import read_counts
from sandbridge.terminals import keys
from sandbridge.terminals.config_dir import config_dir
from sandbridge.terminals.control import Place, call
from sandbridge.terminals.owner_approval import Shown, answer_request, approve_request

# Sessions the page lists: a user runs a handful; a flood of them is cut, not rendered.
MAX_SESSIONS = 64
# The owner's questions one session lists (its bridges keep at most 8 waiting:
# aio/owner_questions.py); more from a session of another version is cut.
MAX_QUESTION_ROWS = 8
# A login's callbacks one session lists (awaited ones, then the last ended: 4 + 8).
MAX_CALLBACK_ROWS = 16
# A session polled for the tables answers on this host in milliseconds. One that takes the
# connection and stays silent (its host stopped with Ctrl-Z) is given this long, once per
# read: the tables of every other session wait for it.
POLL_TIMEOUT = 2.0
# The longest approval the page may sign (the CLI's --duration has no cap; a page click gets
# a day at most), and the shortest.
MAX_TTL = 24 * 3600.0
MIN_TTL = 1.0
EGRESS_SCOPES = ("once", "session")
# Why a far session has no Stop here: the link carries terminal ops only
# (remote/far_terminals.py), so that a laptop cannot end what runs on the far machine.
FAR_STOP = "stop it on {machine} (sandbridge stop there): the link carries terminal requests only"


def _ask(session: str, message: dict[str, Any], key: str | None) -> Any:
    """One control call's field ``key`` (None: its whole answer), or None if the session
    cannot answer it (a session without terminals has no control socket); a session that
    does not answer in time raises ControlTimeout."""
    try:
        answer = call(session, message, POLL_TIMEOUT)
    except ControlTimeout:
        raise
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


@dataclass(frozen=True, slots=True)
class Answers:
    """What one session answered the dashboard: ``session_info`` (None: it could not be
    asked), its egress destinations, its terminal requests and its egress requests
    waiting for the owner."""

    info: dict[str, Any] | None
    destinations: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    # Whether the page's actions reach it (they travel on its control socket).
    controllable: bool = True
    # Its apps as its host holds them (None: as its registry entry lists them).
    apps: list[AppRecord] | None = None
    # Its bridges' questions waiting for the owner (aio/owner_questions.py).
    questions: list[dict[str, Any]] = field(default_factory=list)


def ask_control_socket(session: str) -> Answers:
    """A session's answers over its control socket (five calls): a session the
    dashboard's host does not serve itself. One that does not answer in time is asked
    nothing more this read (it is listed, not controllable)."""
    try:
        return Answers(
            _ask(session, {"op": "session_info"}, None),
            list(_ask(session, {"op": "egress_summary"}, "destinations") or []),
            list(_ask(session, {"op": "list"}, "requests") or []),
            list(_ask(session, {"op": "egress_pending"}, "requests") or []),
            questions=list(_ask(session, {"op": "questions"}, "questions") or []),
        )
    except ControlTimeout as exc:
        log.debug("ui.session_silent", session=session, error=str(exc))
        return Answers(None)


def snapshot(served: Mapping[str, Answers] | None = None) -> dict[str, Any]:
    """The tables: sessions, apps, terminal requests, logins, egress (and pending asks),
    and the bridges' questions waiting for the owner.

    ``served``: the answers of the sessions the dashboard's host serves itself (the
    daemon reads them in-process); every other running session is asked over its control
    socket."""
    owner, names = _names()
    tables: dict[str, list[dict[str, Any]]] = {
        "sessions": [], "apps": [], "terminals": [], "egress": [], "egress_pending": [],
        "logins": [], "questions": [],
    }  # fmt: skip
    for record in list_sessions()[:MAX_SESSIONS]:
        try:
            answers = (served or {}).get(record.id) or ask_control_socket(record.id)
            _add_session(tables, record, answers, owner, names)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # An answer not shaped as ours (a session of another sandbridge version):
            # that session's rows are left out, the others shown.
            log.warning("ui.session_unreadable", session=record.id, error=type(exc).__name__)
    for remote in list_remotes():
        _add_machine(tables, remote, owner, names)
    return tables


def _add_session(
    tables: dict[str, list[dict[str, Any]]],
    record: SessionRecord,
    answers: Answers,
    owner: str | None,
    names: dict[str, str],
) -> None:
    """One session's rows in each table (the rows of other tables are added only once
    every answer of this session was read)."""
    info = answers.info
    counts = {"allowed": 0, "refused": 0}
    for row in answers.destinations:
        counts[row["decision"]] += int(row["count"])
    # ``started``, not an uptime: the page counts the seconds itself, so the tables
    # change (and are sent) only when something happens.
    session = {
        "id": record.id, "workdir": record.workdir,
        "command": None if info is None else " ".join(str(p) for p in info["command"]),
        "started": record.started,
        "network": None if info is None else str(info["network"]),
        "egress": counts, "ssh_agent": _signatures(record.id),
        "clipboard": _clipboard(record.id), "containers": _containers(record.id),
        "controllable": info is not None and answers.controllable,
        "machine": None,
    }  # fmt: skip
    terminals = []
    for request in answers.requests:
        requester = str(request["requester"])
        name = "owner (you)" if requester == owner else names.get(requester)
        terminals.append({**request, "session": record.id, "name": name, "machine": None})
    tables["sessions"].append(session)
    tables["apps"] += [
        {
            "session": record.id, "port": app.port, "process": app.process, "url": app.url,
            "host_port": app.host_port, "private": app.private,
        }
        for app in (record.apps if answers.apps is None else answers.apps)
    ]  # fmt: skip
    tables["terminals"] += terminals
    # A login's callbacks (docs/open.md): awaited, then the last few ended; never a query.
    tables["logins"] += [
        {
            "session": record.id, "callback": f"http://{c['host']}:{int(c['port'])}{c['path']}",
            "authorize_host": str(c["authorize_host"]), "state": str(c["state"]),
        }
        for c in ([] if info is None else info.get("callbacks", []))[:MAX_CALLBACK_ROWS]
    ]  # fmt: skip
    tables["egress"] += [{**row, "session": record.id} for row in answers.destinations]
    # A question's text is the session's (a signature's purpose comes from the sandbox):
    # shown escaped as the egress reasons are, each field read as what it must be.
    tables["questions"] += [
        {
            "session": record.id, "id": str(q["id"])[:40], "kind": str(q["kind"])[:40],
            "text": shown(str(q["text"])), "asked": float(q["asked"]),
            "expires": float(q["expires"]),
        }
        for q in answers.questions[:MAX_QUESTION_ROWS]
    ]  # fmt: skip
    # The reason is the sandbox's own text: shown as the owner's terminal shows it, its
    # line breaks, bidi overrides and zero-width characters escaped (egress/requests.py).
    tables["egress_pending"] += [
        {**ask, "session": record.id, "reason": shown(str(ask["reason"]))}
        for ask in answers.pending
    ]


def _signatures(session: str) -> dict[str, int] | None:
    """The session's ssh-agent signatures, made and refused (None: no bridge, or none
    asked for yet), from its session dir (ssh_agent/signature_log.py)."""
    try:
        counts = read_counts(session_path(session))
    except SessionError:  # it ended since it was listed
        return None
    if not counts:
        return None
    return {
        "signed": sum(c.signed for c in counts),
        "refused": sum(c.refused for c in counts),
    }


def _clipboard(session: str) -> dict[str, int] | None:
    """The session's clipboard transfers, made and refused (None: no bridge, or none
    asked for yet), from its session dir (clipboard/read_log.py)."""
    try:
        counts = read_log.read_counts(session_path(session))
    except SessionError:  # it ended since it was listed
        return None
    if counts is None:
        return None
    refused = counts.reads_refused + counts.writes_refused
    return {"reads": counts.reads, "writes": counts.writes, "refused": refused}


def _containers(session: str) -> dict[str, int] | None:
    """The session's container engine requests (None: no bridge, or none asked yet), from
    its session dir (containers/decision_log.py)."""
    try:
        counts = decision_log.read_counts(session_path(session))
    except SessionError:  # it ended since it was listed
        return None
    if counts is None:
        return None
    return {"allowed": counts.allowed, "refused": counts.refused, "created": counts.created}


def _add_machine(
    tables: dict[str, list[dict[str, Any]]],
    remote: RemoteRecord,
    owner: str | None,
    names: dict[str, str],
) -> None:
    """A far machine's rows, as ``sandbridge connect`` serves it here (docs/remote.md):
    its apps, and its sessions and their terminal requests as the far side described
    them. Each is shown as ``MACHINE:SESSION``, the machine named by this laptop (the
    ``connect``'s own name for it), never by the far side; closing an app or stopping a
    session is the far owner's, not the page's."""
    machine = remote.machine
    tables["apps"] += [
        {
            "session": f"{machine}:{app.session}", "port": app.port, "process": None,
            "url": app.url, "host_port": app.host_port, "private": app.private,
            "machine": machine,
        }
        for app in remote.apps
    ]  # fmt: skip
    for far in remote.sessions if remote.connected else ():
        place = Place(machine, far.id)
        tables["sessions"].append(
            {
                "id": str(place), "machine": machine, "workdir": far.workdir,
                "command": far.command, "started": far.started, "network": far.network,
                "egress": None, "ssh_agent": None, "clipboard": None, "containers": None,
                "controllable": False,
                "stop_note": FAR_STOP.format(machine=machine),
            }
        )  # fmt: skip
        for request in far.requests:
            name = "owner (you)" if request.requester == owner else names.get(request.requester)
            tables["terminals"].append(
                {
                    "id": place.request_id(request.id), "session": str(place),
                    "machine": machine, "state": request.state,
                    "requester": request.requester, "name": name, "reason": request.reason,
                    "created": request.created, "duration": request.duration,
                    "expires": request.expires,
                }
            )  # fmt: skip


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise SandbridgeError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _answer_question(body: dict[str, Any]) -> dict[str, Any]:
    """The owner's yes or no to a bridge's question, sent to the session named: an id of
    another session's is unknown there (aio/owner_questions.py refuses it by code)."""
    session = validate_name(_text(body, "session"), "session")
    yes = body.get("yes")
    if type(yes) is not bool:
        raise SandbridgeError(f"yes must be true or false, got {yes!r}")
    return call(session, {"op": "question_answer", "id": _text(body, "id"), "yes": yes})


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
        request_id = _text(body, "id")
        ttl = body.get("ttl")
        if ttl is not None and (
            not isinstance(ttl, int | float)
            or isinstance(ttl, bool)
            or not MIN_TTL <= ttl <= MAX_TTL
        ):
            raise SandbridgeError(f"ttl must be {MIN_TTL:g} to {MAX_TTL:g} seconds, got {ttl!r}")
        # What the row showed: only that request is signed (owner_approval.check_shown).
        asked = body.get("duration")
        if asked is not None and (not isinstance(asked, int | float) or isinstance(asked, bool)):
            raise SandbridgeError(f"duration must be a number of seconds or null, got {asked!r}")
        shown = Shown(_text(body, "requester"), None if asked is None else float(asked))
        # ttl None: the duration the request asked for, else the default.
        return approve_request(request_id, None if ttl is None else float(ttl), shown)
    if action in ("terminal_deny", "terminal_revoke"):
        # SESSION:XXXXXXXX, or MACHINE:SESSION:XXXXXXXX: sent to that far session
        # through its machine's `connect`, as `sandbridge terminal deny` sends it.
        # A far one is signed with the owner key (owner_approval.answer_request).
        return answer_request(_text(body, "id"), "deny" if action == "terminal_deny" else "revoke")
    if action == "question_answer":
        return _answer_question(body)
    if action in ("egress_approve", "egress_deny"):
        session = validate_name(_text(body, "session"), "session")
        message: dict[str, Any] = {"op": action, "id": _text(body, "id")}
        if action == "egress_approve":
            scope = body.get("scope")
            if scope not in EGRESS_SCOPES:
                raise SandbridgeError(f"scope must be once or session, got {scope!r}")
            # private: grant the name with 'private' (the proxy may connect it to
            # non-global addresses), sent only once the session refused it without
            # (needs_private): a strict bool, as the CLI's --private is a flag.
            private = body.get("private", False)
            if type(private) is not bool:
                raise SandbridgeError(f"private must be true or false, got {private!r}")
            message |= {"scope": scope, "save": body.get("save") is True, "private": private}
        return call(session, message)
    raise SandbridgeError(f"unknown action {str(action)[:40]!r}")


__all__ = ["ControlError", "SessionError", "act", "snapshot"]
