"""The clipboard commands inside the sandbox: ``wl-paste``, ``wl-copy``, ``xclip`` and
``xsel`` stand-ins that ask the host's clipboard bridge (docs/clipboard.md).

``python -m sandbridge.clipboard.inside NAME ARGS...``: the sandbox entry writes one
script per name (sandbox/commands.py) only when the session's ``clipboard.sock`` exists.
The flags agents use are read; any other is refused with one line naming it.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass

from sandbridge.exceptions import ClipboardRefused, WireError
from sandbridge.protocol import clipboard as wire
from sandbridge.protocol.contract import CLIPBOARD_SOCKET, MOUNT_POINT

NAMES = ("wl-paste", "wl-copy", "xclip", "xsel")
# How long the host may take: it may be asking the owner (its own question waits 60 s).
ANSWER_TIMEOUT = 90.0
READ_BYTES = 64 * 1024
# What the tools call text, as agents pass it.
_TEXT_NAMES = frozenset(
    {"text/plain", "text/plain;charset=utf-8", "UTF8_STRING", "STRING", "TEXT", "text"}
)


@dataclass(frozen=True, slots=True)
class Invocation:
    """What one command line asks: ``op`` of the wire's ops, ``type``, and whether a
    text gets a final newline (wl-paste without ``-n``)."""

    op: str
    type: str = wire.TEXT
    newline: bool = False


def _type(value: str) -> str:
    if value in _TEXT_NAMES:
        return wire.TEXT
    if value == wire.PNG:
        return wire.PNG
    raise ClipboardRefused(f"type {value!r} is not carried; only text/plain and image/png")


def _wl(name: str, args: list[str]) -> Invocation:
    kind, newline, listing = wire.TEXT, name == "wl-paste", False
    rest = iter(args)
    for arg in rest:
        if arg in ("-t", "--type"):
            kind = _type(next(rest, ""))
        elif arg.startswith("--type="):
            kind = _type(arg.partition("=")[2])
        elif arg in ("-n", "--no-newline") and name == "wl-paste":
            newline = False
        elif arg in ("-l", "--list-types") and name == "wl-paste":
            listing = True
        elif arg in ("-o", "--trim-newline") and name == "wl-copy":
            continue
        else:
            raise ClipboardRefused(f"flag {arg!r} is not served")
    if listing:
        return Invocation(wire.LIST_TYPES)
    if name == "wl-copy":
        return Invocation(wire.WRITE, kind)
    return Invocation(wire.READ, kind, newline and kind == wire.TEXT)


def _xclip(args: list[str]) -> Invocation:
    op, kind = wire.WRITE, wire.TEXT
    rest = iter(args)
    for arg in rest:
        if arg in ("-selection", "-sel", "-se"):
            selection = next(rest, "")
            if selection not in ("clipboard", "c", "clip"):
                raise ClipboardRefused(f"selection {selection!r} is not served; only clipboard")
        elif arg in ("-o", "-out"):
            op = wire.READ
        elif arg in ("-i", "-in"):
            op = wire.WRITE
        elif arg in ("-t", "-target"):
            target = next(rest, "")
            if target == "TARGETS":
                op = wire.LIST_TYPES
            else:
                kind = _type(target)
        elif arg in ("-rmlastnl", "-r", "-quiet", "-q", "-silent"):
            continue
        else:
            raise ClipboardRefused(f"flag {arg!r} is not served")
    return Invocation(op, kind)


def _xsel(args: list[str]) -> Invocation:
    op = wire.READ if sys.stdin.isatty() else wire.WRITE
    for arg in args:
        if arg in ("-b", "--clipboard"):
            continue
        if arg in ("-o", "--output"):
            op = wire.READ
        elif arg in ("-i", "--input"):
            op = wire.WRITE
        else:
            raise ClipboardRefused(f"flag {arg!r} is not served")
    return Invocation(op)


def parse_invocation(name: str, args: list[str]) -> Invocation:
    """What ``name args`` asks; refuses (:class:`ClipboardRefused`) what is not served."""
    if name in ("wl-paste", "wl-copy"):
        return _wl(name, args)
    if name == "xclip":
        return _xclip(args)
    if name == "xsel":
        return _xsel(args)
    raise ClipboardRefused(f"command {name!r} is not a clipboard stand-in")


def _receive(sock: socket.socket) -> tuple[wire.ClipboardAnswer, bytes]:
    data = b""
    while b"\n" not in data:
        chunk = sock.recv(READ_BYTES)
        if not chunk:
            raise WireError("the host closed the connection without an answer")
        data += chunk
        if len(data) > wire.MAX_HEADER_BYTES * 4 and b"\n" not in data:
            raise WireError("the host's answer is too long")
    line, _, body = data.partition(b"\n")
    answer = wire.parse_answer(line)
    reader = wire.BodyReader(answer.size)
    reader.feed(body)
    while not reader.complete and (chunk := sock.recv(READ_BYTES)):
        reader.feed(chunk)
    return answer, reader.finish()


def exchange(
    path: str, invocation: Invocation, data: bytes = b""
) -> tuple[wire.ClipboardAnswer, bytes]:
    """One request to the host's bridge at ``path``: its answer and the bytes read."""
    request = wire.ClipboardRequest(invocation.op, invocation.type, len(data))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(ANSWER_TIMEOUT)
        sock.connect(path)
        try:
            sock.sendall(wire.encode_request(request))
            if invocation.op == wire.WRITE:
                sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)  # the host refuses more bytes than declared
        except (BrokenPipeError, ConnectionResetError):
            pass  # the host answered without reading it all (a refusal): its answer says why
        return _receive(sock)


def main(argv: list[str] | None = None) -> int:
    """Run one stand-in: ``argv`` is its name then its arguments."""
    argv = sys.argv[1:] if argv is None else argv
    name = argv[0] if argv else ""
    try:
        invocation = parse_invocation(name, argv[1:])
    except ClipboardRefused as exc:
        print(f"{name}: {exc} (sandbridge's clipboard stand-in)", file=sys.stderr)
        return 2
    data = b""
    if invocation.op == wire.WRITE:
        data = sys.stdin.buffer.read(wire.MAX_BYTES[invocation.type] + 1)
    path = os.path.join(MOUNT_POINT, CLIPBOARD_SOCKET)
    try:
        answer, body = exchange(path, invocation, data)
    except (OSError, WireError) as exc:
        print(f"{name}: the host's clipboard bridge did not answer ({exc})", file=sys.stderr)
        return 1
    if not answer.ok:
        print(f"{name}: {answer.error}", file=sys.stderr)
        return 1
    if invocation.op == wire.LIST_TYPES:
        sys.stdout.write("".join(f"{t}\n" for t in answer.types))
    elif invocation.op == wire.READ:
        sys.stdout.buffer.write(body + (b"\n" if invocation.newline else b""))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
