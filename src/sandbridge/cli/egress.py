"""``sandbridge egress pending|approve|deny``: the owner's answers to the sandbox's egress
requests (``sandbridge-allow`` inside), sent over each session's control socket.

Every text that came from the sandbox (the reason) is printed escaped: a reason cannot
move the cursor, clear the screen or start a second line on the owner's terminal.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sandbridge.exceptions import SandbridgeError
from sandbridge.places.registry import list_sessions, validate_name
from sandbridge.shown_text import quoted
from sandbridge.terminals.control import call, split_request_id


def _pending_of(session: str) -> list[dict[str, Any]]:
    return list(call(session, {"op": "egress_pending"})["requests"])


def cmd_pending(args: argparse.Namespace) -> int:
    if args.session:
        rows = _pending_of(validate_name(args.session, "session"))
    else:
        rows = []
        for record in list_sessions():
            try:
                rows += _pending_of(record.id)
            except SandbridgeError:  # no control socket, or no egress proxy: nothing pending
                continue
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no pending egress requests")
    for row in rows:
        print(
            f"{row['id']}  {row['session']}  {row['destination']}  {_age(float(row['age']))}  "
            f"reason: {quoted(str(row['reason']))}"
        )
        if row.get("caution"):
            print(f"  WARNING: {row['caution']}")
    return 0


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    return f"{seconds / 60:.0f}m ago"


def _confirmed(session: str, request_id: str, what: str, save: bool, private: bool) -> bool:
    """At a terminal, what the request asks for, from the session's own table, and the
    owner's yes: the line the owner copied the id from was printed on the terminal the
    sandbox writes to, so the sandbox may have rewritten it (an id beside another host)."""
    rows = [row for row in _pending_of(session) if row.get("id") == request_id]
    if not rows:
        return True  # nothing to show: the session's own refusal names why
    row = rows[0]
    granted = str(row["destination"])
    if private and not granted.endswith(" private"):
        granted += " private"  # what --private grants, spelled out
    print(f"egress request {request_id} asks for {granted} ({what}"
          f"{', saved to .sandbridge/allow' if save else ''}), "
          f"reason: {quoted(str(row['reason']))}")  # fmt: skip
    if row.get("caution"):
        print(f"  WARNING: {row['caution']}")
    try:
        answer = input("approve it? [y/N] ")
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


def cmd_approve(args: argparse.Namespace) -> int:
    # One connection by default; what is saved for every later session is allowed for
    # the rest of this one too, unless --once says otherwise.
    scope = args.scope or ("session" if args.save else "once")
    session = split_request_id(args.id)
    what = "one connection" if scope == "once" else "until the session ends"
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    if (
        interactive
        and not args.yes
        and not _confirmed(session, args.id, what, args.save, args.private)
    ):
        print(f"not approved: egress request {args.id} stays pending")
        return 1
    message = {"op": "egress_approve", "id": args.id, "scope": scope, "save": args.save}
    answer = call(session, message | {"private": args.private})
    print(f"approved {args.id}: {answer['destination']}, {what}")
    if answer.get("saved"):
        print(f"saved to {answer['saved']} (read by the next session)")
    return 0


def cmd_deny(args: argparse.Namespace) -> int:
    call(split_request_id(args.id), {"op": "egress_deny", "id": args.id})
    print(f"denied {args.id}")
    return 0


def add_egress(egress: argparse.ArgumentParser) -> None:
    """``sandbridge egress``'s commands."""
    sub = egress.add_subparsers(dest="egress_command", required=True)

    pending = sub.add_parser("pending", help="requests waiting for your answer")
    pending.add_argument("--session", default=None, help="only this session")
    pending.add_argument("--json", action="store_true", help="print JSON for scripts")
    pending.set_defaults(func=cmd_pending)

    approve = sub.add_parser("approve", help="allow a requested destination")
    approve.add_argument("id", help="the request id (SESSION:XXXXXXXX)")
    scope = approve.add_mutually_exclusive_group()
    scope.add_argument(
        "--once",
        dest="scope",
        action="store_const",
        const="once",
        help="one connection, then refused again (the default without --save)",
    )
    scope.add_argument(
        "--session",
        dest="scope",
        action="store_const",
        const="session",
        help="every connection until the session ends (the default with --save)",
    )
    approve.add_argument(
        "--save",
        action="store_true",
        help="also append the entry, with the reason and date as a comment, to the "
        "project's .sandbridge/allow (read by the next session)",
    )
    approve.add_argument(
        "--private",
        action="store_true",
        help="grant the name with 'private': the proxy may connect it to loopback, private "
        "and link-local addresses (a company mirror; without it such a name is refused)",
    )
    approve.add_argument(
        "--yes",
        action="store_true",
        help="do not ask (at a terminal, approve first shows the destination and asks)",
    )
    approve.set_defaults(func=cmd_approve, scope=None)

    deny = sub.add_parser("deny", help="refuse a request; the waiting sandbridge-allow fails")
    deny.add_argument("id", help="the request id (SESSION:XXXXXXXX)")
    deny.set_defaults(func=cmd_deny)
