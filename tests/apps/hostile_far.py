"""A hostile far machine for ``sandbridge connect --via``: speaks the remote protocol on
stdin/stdout, lists one app, then breaks the protocol the way ``MODE`` says.

Usage: hostile_far.py MODE   (open: sends OPEN itself; early: answers an OPEN with data
before opening the stream; garbage: lists the app, then sends an unknown kind; many:
lists more apps than the limit; empty: opens the stream,
then floods it with empty DATA frames; churn: sends 1,000 lists of 300 apps at once,
alternating, then a list of one app, evil port 9999; crowd: lists 200 apps)
"""

from __future__ import annotations

import json
import os
import select
import sys

from sandbridge.protocol.remote_wire import (
    HEADER,
    FarApp,
    Kind,
    LinkState,
    OpenStream,
    Role,
)


def main() -> None:
    mode = sys.argv[1]
    state = LinkState(Role.FAR)
    out = sys.stdout.buffer
    out.write(state.send_hello())
    out.write(state.send_apps((FarApp("evil", 8080, "/"),)))
    out.flush()
    if mode == "open":
        out.write(HEADER.pack(2, Kind.OPEN, 1) + b"{}")
    elif mode == "garbage":
        out.write(HEADER.pack(0, 200, 0))
    elif mode == "churn":
        lists = [
            tuple(FarApp("evil", port, "/") for port in range(first, first + 300))
            for first in (1, 301)
        ]
        for i in range(1000):
            out.write(state.send_apps(lists[i % 2]))
        out.write(state.send_apps((FarApp("evil", 9999, "/"),)))
    elif mode == "crowd":
        out.write(state.send_apps(tuple(FarApp("evil", port, "/") for port in range(1, 201))))
    elif mode == "many":
        # Built by hand: LinkState.send_apps would refuse to send the list.
        apps = [{"port": 1 + i, "base_path": "/"} for i in range(5000)]
        out.write(_frame(Kind.APPS, 0, json.dumps({"sessions": [{"id": "evil", "apps": apps}]})))
    out.flush()
    while select.select([0], [], [])[0]:
        data = os.read(0, 65536)
        if not data:
            return
        for event in state.receive(data):
            if isinstance(event, OpenStream) and mode == "early":
                out.write(HEADER.pack(5, Kind.DATA, event.stream) + b"early")
                out.flush()
            elif isinstance(event, OpenStream) and mode == "empty":
                out.write(state.send_opened(event.stream))
                out.write(HEADER.pack(0, Kind.DATA, event.stream) * 200_000)
                out.flush()


def _frame(kind: Kind, stream: int, text: str) -> bytes:
    return HEADER.pack(len(text), kind, stream) + text.encode()


if __name__ == "__main__":
    main()
