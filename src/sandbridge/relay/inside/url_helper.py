"""``ags-webview-url <port> [base_path]``: register a sandbox app, print its host URL.

Runs inside the sandbox. It sends one registration to ``$AGS_WEBVIEW_RELAY_SOCKET``
(default ``/run/ags-webview-relay/relay.sock``) and prints the ``url`` of the answer.
Exit status: 0 registered, 1 refused or relay unreachable, 2 usage error.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys

from sandbridge.protocol.contract import DEFAULT_RELAY_SOCKET, RELAY_SOCKET_ENV
from sandbridge.protocol.sandbox_requests import (
    ANSWER_TIMEOUT,
    MAX_ANSWER_BYTES,
    answer_complete,
    decode_answer,
    encode_register_request,
)

USAGE = "usage: ags-webview-url <port> [base_path]"


def register(port: int, base_path: str, socket_path: str) -> dict[str, object]:
    """Send one registration and return the relay's decoded answer."""
    return ask_relay(encode_register_request(port, base_path), socket_path)


def ask_relay(request: bytes, socket_path: str) -> dict[str, object]:
    """Send one request line to ``relay.sock`` and return the decoded answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(ANSWER_TIMEOUT)
        sock.connect(socket_path)
        # The relay may answer before it takes the whole request (an HTML page refused
        # on its first line, unread) and close: its answer is still here to read.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(request)
        answer = b""
        while not answer_complete(answer):
            data = sock.recv(MAX_ANSWER_BYTES)
            if not data:
                break
            answer += data
    return decode_answer(answer)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2 or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        port = int(args[0])
    except ValueError:
        print(
            f"ags-webview-url: port must be an integer 1..65535, got {args[0]!r}", file=sys.stderr
        )
        return 2
    base_path = args[1] if len(args) == 2 else "/"
    socket_path = os.environ.get(RELAY_SOCKET_ENV, DEFAULT_RELAY_SOCKET)
    try:
        answer = register(port, base_path, socket_path)
    except (OSError, ValueError) as exc:
        print(f"ags-webview-url: relay at {socket_path} unreachable: {exc}", file=sys.stderr)
        return 1
    if answer.get("ok") is not True:
        print(f"ags-webview-url: refused: {answer.get('error')}", file=sys.stderr)
        return 1
    print(answer["url"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
