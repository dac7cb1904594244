"""A hostile far machine for ``sandbridge connect --via``: speaks the remote protocol on
stdin/stdout, lists one app, then breaks the protocol the way ``MODE`` says.

Usage: hostile_far.py MODE   (open: sends OPEN itself; early: answers an OPEN with data
before opening the stream; garbage: lists the app, then sends an unknown kind; lies:
answers every terminal control line with a listing of another session's request and
nothing else; escape: with a listing whose fields carry terminal escape sequences;
refuse: with a refusal whose code and message carry them (an OSC 52 clipboard write);
stateful: with an answer to every op whose state carries them; impostor: with a request
whose requester is not the key that signed it (another's request shown as the owner's);
huge: with numbers that are JSON integers of 400 digits; elsewhere: with an attach
challenge for another session than the one asked; hangup: with an attach challenge, then
nothing (the stream ends);
many: lists more apps than the limit; empty: opens the stream, then floods it with
empty DATA frames; churn: sends 1,000 lists of 300 apps at once, alternating, then a
list of one app, evil port 9999; crowd: lists 200 apps; describe: describes its
session "evil" with markup in its workdir, command and a pending request's reason;
foreign: describes a request of another session, which the laptop refuses; fill:
answers every request with a response head and the rest of the stream's whole window,
fills it again at every credit, and
says each stream the laptop resets on its stderr)
"""

from __future__ import annotations

import json
import os
import select
import sys

from sandbridge.protocol.far_sessions import FarRequest, FarSession
from sandbridge.protocol.remote_wire import (
    HEADER,
    STREAM_WINDOW,
    Credited,
    Data,
    FarApp,
    Kind,
    LinkState,
    OpenControl,
    OpenStream,
    Reset,
    Role,
)

# An OSC 52 clipboard write: "echo pwned" in the owner's clipboard, ready to paste.
CLIPBOARD = "\x1b]52;c;ZWNobyBwd25lZA==\x07"

# What the lying far side answers to any terminal control line, per mode.
ANSWERS = {
    "lies": {"ok": True, "instance": "i", "requests": [{"id": "other:0123abcd"}]},
    "escape": {
        "ok": True,
        "requests": [
            {
                "id": "evil:0123abcd",
                "state": "pending\x1b[2J",
                "requester": "\x1b]0;pwned\x07" + "a" * 64,
                "reason": "look\x1b[31m here",
            }
        ],
    },
    "refuse": {"ok": False, "code": "nope\x1b[2J", "error": CLIPBOARD + "approved\x1b[1A"},
    "stateful": {"ok": True, "instance": "i", "id": "evil:0123abcd", "state": CLIPBOARD + "ok"},
    "impostor": {
        "ok": True,
        "instance": "i",
        "id": "evil:0123abcd",
        "requester": "ab" * 32,
        "request": {"requester": "ab" * 32, "reason": "", "created": 1.7e9, "nonce": "n"},
        "state": "approved",
        "expires": 2e9,
    },
    "elsewhere": {"ok": True, "session": "other", "instance": "i", "challenge": "00" * 32},
    "hangup": {"ok": True, "session": "evil", "instance": "i", "challenge": "00" * 32},
    "huge": {
        "ok": True,
        "instance": "i",
        "requests": [{"id": "evil:0123abcd", "state": "pending", "duration": 10**400}],
        "request": {"requester": "ab" * 32, "reason": "", "created": 10**400, "nonce": "n"},
        "duration": 10**400,
        "expires": 10**400,
    },
}


# What mode fill answers each request with: one stream's whole window.
FILLER = b"x" * STREAM_WINDOW

# Markup where a far machine writes text: the dashboard must show it as text.
MARKUP = "<img src=x onerror=\"document.title='pwned'\"><b>bold</b>"
REQUESTER = "ab" * 32


def described(request_id: str) -> tuple[FarSession, ...]:
    request = FarRequest(request_id, "pending", REQUESTER, MARKUP, 1.7e9, 600.0, None)
    return (FarSession("evil", f"/w/{MARKUP}", f"sh -c {MARKUP}", 1.7e9, "full", (request,)),)


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
    elif mode == "describe":
        out.write(state.send_apps((FarApp("evil", 8080, "/"),), described("evil:0123abcd")))
    elif mode == "foreign":
        out.write(state.send_apps((FarApp("evil", 8080, "/"),), described("other:0123abcd")))
    elif mode == "crowd":
        out.write(state.send_apps(tuple(FarApp("evil", port, "/") for port in range(1, 201))))
    elif mode == "overtaken":
        # Malformed lists overtaken by a good one before the laptop applies the next
        # list (it applies one every 0.5 s, the first at once): never parsed, so they end
        # nothing. One write of at most PIPE_BUF bytes, so the laptop reads none or all of
        # it: a read of part of it with the first list made a malformed one the latest,
        # applied at once (CI met it once).
        burst = _frame(Kind.APPS, 0, '{"sessions": {}}') * 150
        burst += state.send_apps((FarApp("evil", 9999, "/"),))
        assert len(burst) <= select.PIPE_BUF, len(burst)
        os.write(1, burst)
    elif mode == "many":
        # Built by hand: LinkState.send_apps would refuse to send the list.
        apps = [{"port": 1 + i, "base_path": "/"} for i in range(5000)]
        out.write(_frame(Kind.APPS, 0, json.dumps({"sessions": [{"id": "evil", "apps": apps}]})))
    out.flush()
    answered: set[int] = set()
    while select.select([0], [], [])[0]:
        data = os.read(0, 65536)
        if not data:
            return
        for event in state.receive(data):
            if isinstance(event, OpenStream) and mode == "early":
                out.write(HEADER.pack(5, Kind.DATA, event.stream) + b"early")
                out.flush()
            elif isinstance(event, OpenControl) and mode in ANSWERS:
                out.write(state.send_opened(event.stream))
                out.flush()
            elif isinstance(event, Data) and mode in ANSWERS and b"\n" in event.data:
                answer = json.dumps(ANSWERS[mode]).encode() + b"\n"
                out.write(state.send_data(event.stream, answer) + state.send_eof(event.stream))
                out.flush()
            elif isinstance(event, OpenStream) and mode == "fill":
                out.write(state.send_opened(event.stream))
                out.flush()
            elif isinstance(event, Data) and mode == "fill" and event.stream not in answered:
                answered.add(event.stream)  # the request came: the whole window answers it
                head = b"HTTP/1.1 200 OK\r\ncontent-length: 1000000000\r\n\r\n"
                out.write(state.send_data(event.stream, head + FILLER[len(head) :]))
                out.flush()
            elif isinstance(event, Credited) and mode == "fill":
                # Credit back: fill the window again (the browser's kernel took the rest);
                # an earlier CREDIT of the same read may have been spent already.
                if credit := state.send_credit_for(event.stream):
                    out.write(state.send_data(event.stream, FILLER[:credit]))
                out.flush()
            elif isinstance(event, Reset) and mode == "fill":
                sys.stderr.write(f"reset {event.stream}: {event.reason}\n")
                sys.stderr.flush()
            elif isinstance(event, OpenStream) and mode == "empty":
                out.write(state.send_opened(event.stream))
                out.write(HEADER.pack(0, Kind.DATA, event.stream) * 200_000)
                out.flush()


def _frame(kind: Kind, stream: int, text: str) -> bytes:
    return HEADER.pack(len(text), kind, stream) + text.encode()


if __name__ == "__main__":
    main()
