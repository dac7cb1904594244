"""The owner's side of a session's control socket: one JSON request, one JSON answer.

A session is named ``SESSION`` (on this machine) or ``HOST:SESSION`` (on the far
machine that a running ``sandbridge connect`` serves as ``HOST``): :class:`Place`. A far
session's control socket is reached through that ``connect``'s own control socket
(``remote/terminal_relay.py``), whose first line names the far session; the rest of the
conversation is the far broker's, byte for byte. A request id is ``SESSION:XXXXXXXX``
as its session shows it, with ``HOST:`` before it for a far one.
"""

from __future__ import annotations

import contextlib
import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbridge.exceptions import ControlError, ControlTimeout, SandbridgeError
from sandbridge.places.registry import session_path, validate_name
from sandbridge.places.socket_path import short_path
from sandbridge.protocol.contract import CONTROL_SOCKET
from sandbridge.protocol.jsonline import decode_json

# Answers are short JSON lines; a listing of 64 requests fits easily.
MAX_ANSWER = 256 * 1024
# A session answers at once, a far one over its link within a second or two. One that
# takes the connection and never answers (a far machine, a session whose host is stopped)
# must not hold its caller for good: the dashboard's actions and its reads of the tables
# share the host's few worker threads (six on two cores), and a few held ones froze it.
ANSWER_TIMEOUT = 10.0
# Ops whose answer waits for the owner by design: never cut short.
WAITING_OPS = frozenset({"await"})
# Text a session chose, as the owner's terminal shows it: a refusal's message names a
# path or a value, far below this.
MAX_SAID = 400


@dataclass(frozen=True, slots=True)
class Place:
    """A session: on this machine (``machine`` None) or on a connected far machine."""

    machine: str | None
    session: str

    def __str__(self) -> str:
        return self.session if self.machine is None else f"{self.machine}:{self.session}"

    def request_id(self, far_id: str) -> str:
        """A request id as the owner types it: ``far_id`` with this machine's prefix."""
        return far_id if self.machine is None else f"{self.machine}:{far_id}"


def parse_place(text: str, what: str = "session") -> Place:
    """``SESSION`` or ``HOST:SESSION``; refuse anything else naming the value."""
    machine, sep, session = text.rpartition(":")
    if not sep:
        return Place(None, validate_name(text, what))
    return Place(validate_name(machine, f"{what}'s machine"), validate_name(session, what))


def parse_request_id(request_id: str) -> tuple[Place, str]:
    """A request id's place and the id its session knows (``SESSION:XXXXXXXX``, what an
    approval signs); refuse anything else naming the value."""
    where, sep, token = request_id.rpartition(":")
    if not sep or len(token) != 8 or any(c not in "0123456789abcdef" for c in token):
        raise SandbridgeError(
            f"request id {request_id!r}: expected SESSION:XXXXXXXX or HOST:SESSION:XXXXXXXX"
        )
    place = parse_place(where, "request id's session")
    return place, f"{place.session}:{token}"


def split_request_id(request_id: str) -> str:
    """The session of a request id ``SESSION:HEX``; refuse anything else."""
    session, sep, token = request_id.rpartition(":")
    if not sep or len(token) != 8 or any(c not in "0123456789abcdef" for c in token):
        raise SandbridgeError(f"request id {request_id!r}: expected SESSION:XXXXXXXX")
    return validate_name(session, "request id's session")


def control_socket(session: str) -> Path:
    return session_path(session) / CONTROL_SOCKET


def socket_of(place: Place) -> Path:
    """The control socket to connect to for ``place``: the session's own, or the
    ``connect`` serving its machine."""
    if place.machine is None:
        return control_socket(place.session)
    # The far machines' records (and their sessions' wire) are a far place's alone:
    # ``status`` and a local session's terminal commands never import them.
    from sandbridge.places.remotes import remote_control_socket

    return remote_control_socket(place.machine)


def first_line(place: Place) -> bytes:
    """What a client sends first on ``place``'s socket: for a far session, its name for
    the ``connect`` relaying it; nothing for a local one."""
    if place.machine is None:
        return b""
    return json.dumps({"session": place.session}).encode() + b"\n"


def connect(session: str | Place, timeout: float | None = None) -> socket.socket:
    """A connection to ``session``'s control socket, its first line sent (``timeout``:
    for each of the socket's operations, None for none)."""
    place = session if isinstance(session, Place) else Place(None, session)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        with short_path(socket_of(place)) as path:
            sock.connect(str(path))
        sock.sendall(first_line(place))
    except OSError as exc:
        sock.close()
        why = exc.strerror or str(exc)
        if place.machine is not None:
            raise SandbridgeError(
                f"the sandbridge connect serving {place.machine!r} does not answer ({why})"
            ) from None
        raise SandbridgeError(
            f"session {place.session!r} does not serve terminals ({why})"
        ) from None
    return sock


def said(value: object, limit: int = MAX_SAID) -> str:
    """Text a session chose (a refusal, a state, an end reason) as one line for the
    owner's terminal, cut to ``limit``.

    Threat: a far machine's session (or a hostile worker's end reason) is hostile, and
    what it says is printed where the owner types: an escape sequence in it would write
    the owner's clipboard (OSC 52), set the title, or draw over the lines above it (a
    fake ``approved``). Defence: every character that is not printable (control, format
    and separator characters: ESC, BEL, newlines, bidi overrides) becomes ``?``."""
    return "".join(c if c.isprintable() else "?" for c in str(value)[:limit])


def parse_answer(line: bytes) -> dict[str, Any]:
    """One answer line; raise ControlError for a refusal, its code and message as
    :func:`said` shows them."""
    if not line:
        raise SandbridgeError("the session closed the control connection")
    try:
        answer = decode_json(line)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise SandbridgeError("the session sent a malformed answer")
    if not answer.get("ok"):
        raise ControlError(said(answer.get("code"), 64), said(answer.get("error")))
    return answer


def call(
    session: str | Place, message: dict[str, Any], timeout: float | None = None
) -> dict[str, Any]:
    """Send one control request to ``session`` (a local session's name, or a
    :class:`Place`); return its answer or raise ControlError. An answer that does not
    come within ``timeout`` (default :data:`ANSWER_TIMEOUT`) is a ControlTimeout naming
    the session (but for :data:`WAITING_OPS`, which wait for the owner)."""
    op = message.get("op")
    if op in WAITING_OPS:
        timeout = None
    elif timeout is None:
        timeout = ANSWER_TIMEOUT
    with connect(session, timeout) as sock:
        try:
            # A relay that refuses at once (the link down) may have stopped reading: its
            # answer still waits to be read.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(json.dumps(message).encode() + b"\n")
            with sock.makefile("rb") as file:
                try:
                    line = file.readline(MAX_ANSWER)
                except ConnectionResetError:
                    line = b""
        except TimeoutError:
            raise ControlTimeout(
                f"session {session} did not answer {str(op)[:40]!r} within {timeout:g} s"
            ) from None
        return parse_answer(line)
