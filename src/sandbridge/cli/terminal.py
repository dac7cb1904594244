"""``sandbridge terminal ...`` and ``sandbridge shell``: the owner's and requester's commands."""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbridge.cli.command_parser import add_deprecated_alias
from sandbridge.exceptions import ControlError, SandbridgeError
from sandbridge.places.registry import list_sessions, validate_name
from sandbridge.terminals import approval, keys
from sandbridge.terminals.control import Place, call, parse_place, parse_request_id, said
from sandbridge.terminals.journal import AuditLog
from sandbridge.terminals.owner_approval import (
    Shown,
    answer_request,
    approve_request,
    check_shown,
)

TTL_PATTERN = re.compile(r"(\d+(?:\.\d+)?)([smh]?)")
TTL_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
# The owner's y/N answer is one short line.
MAX_ANSWER = 256


def parse_ttl(text: str, flag: str = "--duration") -> float:
    """``90``, ``90s``, ``10m`` or ``1h`` in seconds; refuse anything else."""
    match = TTL_PATTERN.fullmatch(text)
    if match is None:
        raise SandbridgeError(f"{flag} {text!r}: use a number with s, m or h (e.g. 10m)")
    return float(match.group(1)) * TTL_UNITS[match.group(2)]


def parse_duration(text: str | None) -> float | None:
    """``--duration``: how long a request asks its approval to last, within the bounds
    of an approval's ttl (refused naming the value); None when not given."""
    if text is None:
        return None
    seconds = parse_ttl(text, "--duration")
    if not approval.MIN_TTL <= seconds <= approval.MAX_TTL:
        raise SandbridgeError(
            f"--duration {text!r}: choose between {approval.MIN_TTL:g}s and "
            f"{approval.MAX_TTL / 3600:g}h (the longest approval)"
        )
    return seconds


def _duration(seconds: object) -> str:
    """A duration as the listing shows it: ``10m``, ``1h``, ``90s``; ``-`` if none."""
    if not isinstance(seconds, int | float):
        return "-"
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _shown(value: object) -> str:
    """``value`` as one printable line (control characters as ``?``)."""
    return said(value, 200)


def _answers_checked(command: Callable[[argparse.Namespace], int]) -> Callable[..., int]:
    """``command`` with a session's answer that lacks a field, has one of the wrong type
    or a number no float holds (a far machine's is hostile: JSON integers have no
    length limit) refused as one line naming it, never a traceback."""

    @functools.wraps(command)
    def checked(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise SandbridgeError(
                f"the session sent a malformed answer ({type(exc).__name__}: {_shown(exc)[:80]})"
            ) from None

    return checked


def _say(text: str) -> None:
    print(f"sandbridge: {text}", file=sys.stderr, flush=True)


def _request(
    place: Place, key_path: Path | None, reason: str, duration: float | None = None
) -> str:
    """Sign and send a request into ``place``; its id as the owner types it."""
    key = keys.requester_key(key_path)
    info = call(place, {"op": "info"})
    document = approval.sign_request(
        key, place.session, str(info["instance"]), reason, time.time(), duration
    )
    answer = call(place, {"op": "request", "request": document})
    far_id = str(answer["id"])
    # The id is the far session's: it must name the session asked, whatever it says.
    parse_request_id(far_id)
    if far_id.rpartition(":")[0] != place.session:
        raise SandbridgeError(f"{place} answered a request id of another session: {far_id!r:.80}")
    return place.request_id(far_id)


def _attach(request_id: str, key_path: Path | None) -> int:
    # Only here: the event loop and the channel are the attaching commands' alone.
    from sandbridge.aio import event_loop
    from sandbridge.terminals.attach import Ending, attach, describe

    key = keys.requester_key(key_path)
    ending: Ending = event_loop.run(attach(request_id, key))
    _say(describe(ending))
    if ending.reason == "exit":
        return ending.status if ending.status >= 0 else 1
    return 128 + 15 if ending.reason == "signal" else 3


@_answers_checked
def cmd_request(args: argparse.Namespace) -> int:
    place = parse_place(args.session)
    request_id = _request(place, args.key, args.reason, parse_duration(args.duration))
    if args.no_wait:
        print(request_id, flush=True)
        return 0
    _say(f"request {request_id}: waiting for the owner (sandbridge terminal approve {request_id})")
    state = call(place, {"op": "await", "id": parse_request_id(request_id)[1]})["state"]
    if state != "approved":
        _say(f"request {request_id} was {_shown(state)}")
        return 1
    return _attach(request_id, args.key)


@_answers_checked
def cmd_approve(args: argparse.Namespace) -> int:
    answer = approve_request(args.id, None if args.duration is None else parse_ttl(args.duration))
    expires = time.strftime("%H:%M:%S", time.localtime(float(answer["expires"])))
    _say(f"approved {args.id} for {_duration(answer['ttl'])}, until {expires}")
    return 0


@_answers_checked
def cmd_deny(args: argparse.Namespace) -> int:
    answer_request(args.id, "deny")
    _say(f"denied {args.id}")
    return 0


@_answers_checked
def cmd_revoke(args: argparse.Namespace) -> int:
    answer = answer_request(args.id, "revoke")
    _say(f"revoked {args.id}" + (" (its terminal is closing)" if answer["was_active"] else ""))
    return 0


def cmd_allow(args: argparse.Namespace) -> int:
    session = validate_name(args.session, "session")
    call(session, {"op": "allow", "key": args.public_key})
    _say(f"session {session}: key {args.public_key[:16]}... may request terminals (each still "
         "needs your approval)")  # fmt: skip
    return 0


def cmd_key(args: argparse.Namespace) -> int:
    print(keys.public_hex(keys.requester_key(args.key)))
    return 0


def cmd_trust_owner(args: argparse.Namespace) -> int:
    path = keys.trust_owner(args.public_key, args.name)
    _say(
        f"approvals signed by {args.public_key[:16]}... are now admitted by this machine's "
        f"sessions ({path}; delete its line to take that back)"
    )
    return 0


def _far_rows(place: Place) -> list[dict[str, Any]]:
    """A far session's requests, their ids as the owner types them (``HOST:...``)."""
    rows = call(place, {"op": "list"})["requests"]
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise SandbridgeError(f"{place} sent a malformed request list")
    for row in rows:
        far_id = str(row.get("id"))
        if far_id.rpartition(":")[0] != place.session:
            raise SandbridgeError(f"{place} listed a request of another session: {far_id!r:.80}")
        row["id"] = place.request_id(far_id)
    return rows


@_answers_checked
def cmd_list(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    if args.session is not None:
        place = parse_place(args.session)
        rows = (
            _far_rows(place)
            if place.machine is not None
            else call(place, {"op": "list"})["requests"]
        )
    for session in [] if args.session is not None else list_sessions():
        try:
            rows += call(session.id, {"op": "list"})["requests"]
        except SandbridgeError:
            continue
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no terminal requests")
    for row in [] if args.json else rows:
        asked = _duration(row.get("duration"))
        # A far machine's answer is hostile: nothing in it may drive this terminal.
        fields = [_shown(row.get(name)) for name in ("id", "state", "requester", "reason")]
        print(f"{fields[0]}  {fields[1]}  {fields[2][:16]}...  {asked}  {fields[3]}")
    return 0


@_answers_checked
def cmd_attach(args: argparse.Namespace) -> int:
    return _attach(args.id, args.key)


# The audit fields that are times (seconds since the epoch): ISO-8601 in the listing.
AUDIT_TIMES = frozenset({"time", "expires"})


def audit_time(seconds: object) -> str:
    """A time of the audit as ISO-8601, local, to the second, with its UTC offset
    (``2026-12-06T09:14:03+01:00``); ``-`` for anything that is not one."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return "-"
    try:
        moment = datetime.datetime.fromtimestamp(seconds).astimezone()
    except (OverflowError, OSError, ValueError):
        return "-"
    return moment.isoformat(timespec="seconds")


def audit_line(record: dict[str, Any]) -> str:
    """One audit record as the listing shows it: its time, its event, then its fields by
    name, times as :func:`audit_time` shows them. A requester wrote some of them (a
    reason): control characters are shown as ``?``."""
    fields = {k: v for k, v in record.items() if k not in ("time", "event", "seq")}
    shown = " ".join(
        f"{k}={audit_time(v) if k in AUDIT_TIMES else _shown(v)}"
        for k, v in sorted(fields.items())
        if v is not None
    )
    return f"{audit_time(record.get('time'))}  {_shown(record.get('event', '?'))}  {shown}"


def cmd_audit(args: argparse.Namespace) -> int:
    records = AuditLog().records()
    if args.json:
        print(json.dumps(records, indent=2))
        return 0
    for record in records:
        print(audit_line(record))
    return 0


@_answers_checked
def cmd_shell(args: argparse.Namespace) -> int:
    """Request, show, ask y/N on the owner's terminal, approve, attach."""
    place = parse_place(args.session)
    ttl = parse_ttl(args.duration)
    request_id = _request(place, None, args.reason)
    far_id = parse_request_id(request_id)[1]
    # The request is the one just signed with the owner key: a session showing another
    # requester under its id (a far machine relaying someone else's request) gets
    # nothing signed, neither when asked nor when approving (it could change between).
    mine = Shown(keys.public_hex(keys.owner_key()), None)
    shown = call(place, {"op": "show", "id": far_id})
    check_shown(request_id, mine, shown, as_asked=False)
    question = (
        f"sandbridge: open a terminal into session {str(place)!r}?\n"
        f"  request   {request_id}\n"
        f"  requester {_shown(mine.requester)} (your owner key)\n"
        f"  reason    {_shown(shown.get('reason') or '-')}\n"
        f"  for       {ttl:g}s, once\n"
        "Approve? [y/N] "
    )
    try:
        terminal = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
        try:
            os.write(terminal, question.encode())
            answer = os.read(terminal, MAX_ANSWER).decode(errors="replace").strip().lower()
        finally:
            os.close(terminal)
    except OSError:
        raise SandbridgeError("sandbridge shell needs a terminal to ask on (/dev/tty)") from None
    if answer not in ("y", "yes"):
        answer_request(request_id, "deny")
        _say(f"denied {request_id}")
        return 1
    approve_request(request_id, ttl, mine)
    return _attach(request_id, None)


SESSION_HELP = "the session (sandbridge ls): SESSION, or HOST:SESSION on a connected machine"
REQUEST_HELP = (
    "the request id (sandbridge terminal list): SESSION:XXXXXXXX or HOST:SESSION:XXXXXXXX"
)


def _key_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--key", type=Path, default=None, help="requester key file (default: the owner key)"
    )


def add_terminal(terminal: argparse.ArgumentParser) -> None:
    """``sandbridge terminal``'s commands."""
    sub = terminal.add_subparsers(dest="terminal_command", required=True)

    request = sub.add_parser("request", help="ask for a terminal; wait for approval and attach")
    request.add_argument("session", help=SESSION_HELP)
    request.add_argument("--reason", default="", help="shown to the owner and audited")
    request.add_argument(
        "--duration", default=None, help="how long to ask the approval to last (e.g. 10m, 1h)"
    )
    request.add_argument("--no-wait", action="store_true", help="print the request id and exit")
    _key_option(request)
    request.set_defaults(func=cmd_request)

    approve = sub.add_parser("approve", help="sign an approval for one terminal")
    approve.add_argument("id", help=REQUEST_HELP)
    approve.add_argument(
        "--duration",
        default=None,
        help="how long it may be used, e.g. 10m, 1h (default: the duration asked, else 10m)",
    )
    add_deprecated_alias(approve, "--ttl", "--duration", "duration")
    approve.set_defaults(func=cmd_approve)

    for name, func, text in (
        ("deny", cmd_deny, "refuse a request"),
        ("revoke", cmd_revoke, "take an approval back; closes its terminal"),
    ):
        command = sub.add_parser(name, help=text)
        command.add_argument("id", help=REQUEST_HELP)
        command.set_defaults(func=func)

    allow = sub.add_parser("allow", help="let another key request terminals in a session")
    allow.add_argument("session", help="the session (sandbridge ls)")
    allow.add_argument("public_key", help="64 hex digits (sandbridge terminal key --key PATH)")
    allow.set_defaults(func=cmd_allow)

    trust = sub.add_parser(
        "trust-owner",
        help="admit approvals signed by another machine's owner key (docs/remote.md)",
    )
    trust.add_argument("public_key", help="64 hex digits (sandbridge terminal key, run there)")
    trust.add_argument("--name", default="", help="a name for it, kept as the line's comment")
    trust.set_defaults(func=cmd_trust_owner)

    key = sub.add_parser("key", help="print a key's public half (default: the owner key)")
    _key_option(key)
    key.set_defaults(func=cmd_key)

    listing = sub.add_parser("list", help="requests of the running sessions")
    listing.add_argument(
        "session", nargs="?", default=None, help="only this one: SESSION or HOST:SESSION"
    )
    listing.add_argument("--json", action="store_true", help="print JSON for scripts")
    listing.set_defaults(func=cmd_list)

    attach_command = sub.add_parser("attach", help="attach to an approved request")
    attach_command.add_argument("id", help=REQUEST_HELP)
    _key_option(attach_command)
    attach_command.set_defaults(func=cmd_attach)

    audit = sub.add_parser("audit", help="the terminal audit log (metadata only)")
    audit.add_argument(
        "--json", action="store_true", help="print the records as stored (times in seconds)"
    )
    audit.set_defaults(func=cmd_audit)


def add_shell(shell: argparse.ArgumentParser) -> None:
    """``sandbridge shell``'s arguments."""
    shell.add_argument("session", help=SESSION_HELP)
    shell.add_argument("--reason", default="", help="recorded in the audit log")
    shell.add_argument(
        "--duration", default="10m", help="how long the approval lasts, e.g. 1h (default 10m)"
    )
    add_deprecated_alias(shell, "--ttl", "--duration", "duration")
    shell.set_defaults(func=cmd_shell)


__all__ = ["ControlError", "add_shell", "add_terminal"]
