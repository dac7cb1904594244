"""``sandbridge-allow HOST[:PORT] --reason "why"``: ask the owner for an egress destination.

Runs inside the sandbox (sandbox/entry.py puts it in ``/run/sandbridge/bin``). It sends
one request line on ``egress.sock`` in the runtime dir (:mod:`sandbridge.protocol.egress_opening`),
prints the request's id on stdout and waits for the owner's answer
(``sandbridge egress approve|deny ID`` on the host). Exit status: 0 approved (or already
allowed; with ``--no-wait``: asked), 1 denied, expired or refused (one line on stderr
saying why), 3 no answer within ``--timeout`` (the request stays pending: the owner may
still approve it), 2 usage.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from sandbridge.exceptions import JsonRefused, WireError
from sandbridge.protocol.contract import DEFAULT_RELAY_SOCKET, EGRESS_SOCKET, RELAY_SOCKET_ENV
from sandbridge.protocol.egress_opening import MAX_EGRESS_LINE_BYTES, decode_reply, encode_request
from sandbridge.protocol.jsonline import LineReader

PROG = "sandbridge-allow"
# How long to wait for the owner unless --timeout says otherwise: a person at the host
# answers in minutes; an agent should not hang for longer.
DEFAULT_TIMEOUT = 300.0
# The host answers the request itself at once.
ANSWER_TIMEOUT = 10.0
TIMED_OUT = 3
# A day: longer is a typo (and an unanswered request expires after an hour anyway).
MAX_TIMEOUT = 86400.0


def _say(text: str) -> None:
    print(f"{PROG}: {text}", file=sys.stderr, flush=True)


def egress_socket() -> Path:
    """``egress.sock`` beside the relay socket (``/run/ags-webview-relay`` by default)."""
    return Path(os.environ.get(RELAY_SOCKET_ENV, DEFAULT_RELAY_SOCKET)).parent / EGRESS_SOCKET


class Replies:
    """Answer lines from the host, each within a deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._pending = b""

    def next(self, deadline: float) -> dict[str, Any] | None:
        """The next line as a JSON object; ``None`` if the deadline passed first."""
        lines = LineReader(MAX_EGRESS_LINE_BYTES)
        data, self._pending = self._pending, b""
        while True:
            line = lines.feed(data) if data else None
            if line is not None:
                self._pending = lines.rest
                return decode_reply(line)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._sock.settimeout(remaining)
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                return None
            if not data:
                raise WireError(
                    "the host closed the connection without an answer (the session ended?)"
                )


def _first_answer(answer: dict[str, Any] | None, destination: str, wait: bool) -> int | None:
    """The exit status the host's first answer decides, or ``None``: wait for the owner."""
    if answer is None:
        _say("the host did not answer the request")
        return 1
    if answer.get("ok") is not True:
        _say(f"refused: {answer.get('error')}")
        return 1
    if answer.get("state") == "allowed":
        _say(f"{destination} is {answer.get('detail')}: nothing to ask")
        return 0
    print(answer.get("id"), flush=True)
    if not wait:
        _say(f"asked the owner for {destination} (request {answer.get('id')}); not waiting")
        return 0
    return None


def _decision(outcome: dict[str, Any] | None, request_id: object, timeout: float) -> int:
    """The exit status the owner's answer (``None``: none in time) decides."""
    if outcome is None:
        _say(
            f"no answer within {timeout:g} s; request {request_id} stays pending (the owner "
            "may still approve it: try again later)"
        )
        return TIMED_OUT
    if outcome.get("ok") is not True:
        _say(str(outcome.get("error")))
        return 1
    what = "one connection" if outcome.get("scope") == "once" else "for the rest of this session"
    _say(f"approved: {outcome.get('destination', request_id)}, {what}")
    return 0


def ask(destination: str, reason: str, wait: bool, timeout: float) -> int:
    """Send the request and report the host's answers; return the exit status."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(ANSWER_TIMEOUT)
        sock.connect(str(egress_socket()))
        sock.sendall(encode_request(destination, reason, wait))
        replies = Replies(sock)
        answer = replies.next(time.monotonic() + ANSWER_TIMEOUT)
        status = _first_answer(answer, destination, wait)
        if status is not None:
            return status
        assert answer is not None
        _say(f"waiting up to {timeout:g} s for the owner to answer request {answer.get('id')}")
        outcome = replies.next(time.monotonic() + timeout)
    return _decision(outcome, answer.get("id"), timeout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Ask the owner to allow an egress destination."
    )
    parser.add_argument("destination", metavar="HOST[:PORT]", help="as .sandbridge/allow names it")
    parser.add_argument("--reason", required=True, help="why the sandbox needs it (shown)")
    parser.add_argument("--no-wait", action="store_true", help="print the id and exit")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"how long to wait for the owner (default {DEFAULT_TIMEOUT:g})",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not 0 < args.timeout <= MAX_TIMEOUT:
        parser.error(f"--timeout must be 0 < SECONDS <= {MAX_TIMEOUT:g}, got {args.timeout:g}")
    try:
        return ask(args.destination, args.reason, not args.no_wait, args.timeout)
    except OSError as exc:
        _say(f"cannot reach the egress gate at {egress_socket()}: {exc.strerror or exc} "
             "(egress requests need net = allow)")  # fmt: skip
        return 1
    except JsonRefused as exc:
        _say(f"malformed answer from the host: {exc}")
        return 1
    except WireError as exc:
        _say(str(exc))
        return 1


if __name__ == "__main__":
    sys.exit(main())
