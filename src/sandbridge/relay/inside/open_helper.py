"""``sandbridge-open URL`` / ``--html FILE``: have the host open a URL of the sandbox (or
any URL), or a snapshot of an HTML page.

Runs inside the sandbox, as ``sandbridge-open`` and as ``$BROWSER``, ``xdg-open``,
``sensible-browser``, ``x-www-browser`` and ``www-browser`` (sandbox/entry.py writes
them), so Python's webbrowser, Node's open and CLIs that open a browser arrive here.
A sandbox-local URL (``http://localhost:5173/a?x=1#f``, ``127.0.0.1``, ``0.0.0.0``,
``[::1]``, ``ws://``) is resolved by the host to the app's host origin, path, query and
fragment kept; any other http(s) URL is passed to the host as it is, and the owner
decides (docs/open.md). ``--html FILE`` (``-``: stdin) sends the page's bytes (at most
2 MiB); the host serves that copy on an origin of its own and opens it. A ``file:///``
URL of an HTML file inside is read here: a page that only redirects to an app of the
sandbox (``jupyter lab``'s) opens that app's URL, any other is sent as ``--html`` sends
it (relay/inside/open_file.py). Prints the URL the host opens and exits 0; a refusal, or
nothing listening on the port inside, is one line on stderr and exit status 1 (2: usage).
"""

from __future__ import annotations

import os
import socket
import sys

from sandbridge.exceptions import RegistrationError
from sandbridge.protocol.app_address import AppAttempts
from sandbridge.protocol.contract import DEFAULT_RELAY_SOCKET, RELAY_SOCKET_ENV
from sandbridge.protocol.file_url import is_file_url
from sandbridge.protocol.limits import MAX_HTML_SNAPSHOT_BYTES
from sandbridge.protocol.open_request import (
    LocalTarget,
    OpenTarget,
    classify_url,
    encode_open_html_request,
    encode_open_request,
)
from sandbridge.relay.inside.open_file import file_open
from sandbridge.relay.inside.url_helper import ask_relay

USAGE = "usage: sandbridge-open URL | sandbridge-open --html FILE (- for stdin)"
PROG = "sandbridge-open"
# The app answers a connection on loopback at once; a second means nothing is there.
CONNECT_TIMEOUT = 2.0


def _error(text: str) -> int:
    print(f"{PROG}: {text}", file=sys.stderr)
    return 1


def listening(port: int) -> str | None:
    """``None`` when something accepts connections on ``port`` at one of the loopback
    addresses the relay connects to (:mod:`sandbridge.protocol.app_address`), else what
    each attempt met."""
    attempts = AppAttempts(port)
    while True:
        address = attempts.address
        try:
            with socket.socket(address.family, socket.SOCK_STREAM) as probe:
                probe.settimeout(CONNECT_TIMEOUT)
                probe.connect((address.host, port))
                return None
        except OSError as exc:
            if not attempts.failed(exc):
                return attempts.error


def read_html(name: str) -> bytes:
    """The page's bytes from ``name`` (``-``: stdin), refused past the snapshot limit."""
    if name == "-":
        data = sys.stdin.buffer.read(MAX_HTML_SNAPSHOT_BYTES + 1)
    else:
        with open(name, "rb") as file:
            data = file.read(MAX_HTML_SNAPSHOT_BYTES + 1)
    if len(data) > MAX_HTML_SNAPSHOT_BYTES:
        shown = "stdin" if name == "-" else name
        raise ValueError(
            f"{shown} is larger than {MAX_HTML_SNAPSHOT_BYTES} bytes, the snapshot limit: "
            "serve the page from an app instead and open its URL"
        )
    return data


def _request(args: list[str]) -> tuple[bytes, OpenTarget | None]:
    """The request line (and page) to send, and the URL's target; a ValueError says
    why there is nothing to send."""
    if args[0] == "--html":
        return encode_open_html_request(read_html(args[1])), None
    url = args[0]
    if is_file_url(url):
        # Read here, inside: the host gets the page or the app URL it redirects to.
        opened = file_open(url)
        if isinstance(opened, bytes):
            return encode_open_html_request(opened), None
        url = opened
    try:
        target = classify_url(url)
    except RegistrationError as exc:
        raise ValueError(str(exc)) from None
    if isinstance(target, LocalTarget) and (tried := listening(target.port)) is not None:
        raise ValueError(
            f"nothing is listening on port {target.port} inside the sandbox "
            f"({tried}): start the app, then open {url}"
        )
    return encode_open_request(url), target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    html = len(args) == 2 and args[0] == "--html"
    if not (html or (len(args) == 1 and not args[0].startswith("-"))):
        print(USAGE, file=sys.stderr)
        return 2
    socket_path = os.environ.get(RELAY_SOCKET_ENV, DEFAULT_RELAY_SOCKET)
    try:
        request, target = _request(args)
    except (OSError, ValueError) as exc:
        return _error(str(exc))
    try:
        answer = ask_relay(request, socket_path)
    except (OSError, ValueError) as exc:
        return _error(f"relay at {socket_path} unreachable: {exc}")
    opened = answer.get("url")
    if answer.get("ok") is not True or not isinstance(opened, str):
        return _error(f"refused: {answer.get('error')}")
    external = target is not None and not isinstance(target, LocalTarget)
    if external and answer.get("action") == "print":
        print(
            f"{PROG}: not opened: the host shows external URLs to its owner instead",
            file=sys.stderr,
        )
    print(opened)
    return 0


if __name__ == "__main__":
    sys.exit(main())
