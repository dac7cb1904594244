"""``sandbridge ls``: the sessions running here and the far machines' apps, as lines or
``--json``."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict

from sandbridge.places.registry import list_sessions
from sandbridge.places.remotes import list_remotes


def add_ls(ls: argparse.ArgumentParser) -> None:
    """``sandbridge ls``'s arguments."""
    ls.add_argument("--json", action="store_true", help="print JSON for scripts")
    ls.set_defaults(func=cmd_ls)


def cmd_ls(args: argparse.Namespace) -> int:
    sessions = list_sessions()
    remotes = list_remotes()
    if args.json:
        local = [{**record.to_json(), "machine": None} for record in sessions]
        far = [
            {
                "machine": remote.machine,
                "id": session,
                "connected": remote.connected,
                "via": remote.via,
                "apps": [asdict(app) for app in remote.apps if app.session == session],
            }
            for remote in remotes
            for session in dict.fromkeys(app.session for app in remote.apps)
        ]
        print(json.dumps(local + far, indent=2))
        return 0
    if not sessions and not remotes:
        print("no running sessions")
        return 0
    for remote in remotes:
        state = "connected" if remote.connected else "reconnecting"
        print(f"{remote.machine}  ({state}, {remote.via})")
        for shown in remote.apps:
            private = "  (private)" if shown.private else ""
            print(f"  {remote.machine}:{shown.session} port {shown.port} -> {shown.url}{private}")
    for record in sessions:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.started))
        print(f"{record.id}  pid {record.pid}  since {started}  {record.workdir}")
        for app in record.apps:
            private = "  (private)" if app.private else ""
            who = "" if app.process is None else f" ({app.process})"
            print(f"  port {app.port}{who} -> {app.url}{private}")
    return 0
