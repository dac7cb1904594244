"""``sandbridge status [SESSION]``: what each running session decided (egress, ssh-agent
signatures, clipboard reads, the container engine) and its logins, as lines or ``--json``."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from sandbridge.clipboard import read_log
from sandbridge.containers import decision_log
from sandbridge.egress.log import read_tally, summarise
from sandbridge.exceptions import SandbridgeError
from sandbridge.places.registry import list_sessions, session_path
from sandbridge.ssh_agent import signature_log
from sandbridge.terminals.control import call

# A session answers its owner's question in milliseconds; one that is stopped (Ctrl-Z) is
# given this long, then left out of status's lines.
STATUS_ASK_TIMEOUT = 2.0


def add_status(status: argparse.ArgumentParser) -> None:
    """``sandbridge status``'s arguments."""
    status.add_argument("session", nargs="?", help="session id (default: every running session)")
    status.add_argument("--json", action="store_true", help="print JSON for scripts")
    status.set_defaults(func=cmd_status)


def _as_dict(value: object) -> object:
    """A dataclass as a dict for JSON (None stays None)."""
    return None if value is None else asdict(value)  # type: ignore[call-overload]


def cmd_status(args: argparse.Namespace) -> int:
    """``sandbridge status [SESSION]``: the egress log of one or every running session."""
    if args.session:
        ids = [args.session]
        session_path(args.session)  # refuses an unknown session by name
    else:
        ids = [record.id for record in list_sessions()]
    if args.json:
        report = [
            {
                "session": session_id,
                "egress": [asdict(t) for t in read_tally(session_path(session_id))],
                "ssh_agent": [
                    asdict(c) for c in signature_log.read_counts(session_path(session_id))
                ],
                "clipboard": _as_dict(read_log.read_counts(session_path(session_id))),
                "containers": _as_dict(decision_log.read_counts(session_path(session_id))),
            }
            for session_id in ids
        ]
        print(json.dumps(report, indent=2))
        return 0
    if not ids:
        print("no running sessions")
        return 0
    for session_id in ids:
        print(f"session {session_id}")
        path = session_path(session_id)
        lines = summarise(read_tally(path)) + signature_log.summarise(
            signature_log.read_counts(path)
        )
        lines += read_log.summarise(read_log.read_counts(path))
        for line in lines + decision_log.summarise(decision_log.read_counts(path)):
            print(f"  {line}")
        for line in login_lines(session_id):
            print(f"  {line}")
    return 0


def login_lines(session_id: str) -> list[str]:
    """``status``'s lines for a session's OAuth callback bridge (docs/open.md), asked of
    the session itself; none when it cannot be asked (no control socket, silent)."""
    try:
        info = call(session_id, {"op": "session_info"}, STATUS_ASK_TIMEOUT)
    except SandbridgeError:
        return []
    if not isinstance(info, dict) or "oauth_callbacks" not in info:
        return []
    lines = [f"logins (OAuth callbacks): {'on' if info['oauth_callbacks'] else 'off'}"]
    for callback in info.get("callbacks", []):
        lines.append(
            f"  http://{callback['host']}:{callback['port']}{callback['path']}"
            f"  from {callback['authorize_host']}: {callback['state']}"
        )
    return lines
