"""The owner's side of a session's control socket: one JSON request, one JSON answer."""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sandbridge.exceptions import ControlError, SandbridgeError
from sandbridge.places.registry import session_path, validate_name
from sandbridge.protocol.contract import CONTROL_SOCKET
from sandbridge.protocol.jsonline import decode_json

# Answers are short JSON lines; a listing of 64 requests fits easily.
MAX_ANSWER = 256 * 1024


def split_request_id(request_id: str) -> str:
    """The session of a request id ``SESSION:HEX``; refuse anything else."""
    session, sep, token = request_id.rpartition(":")
    if not sep or len(token) != 8 or any(c not in "0123456789abcdef" for c in token):
        raise SandbridgeError(f"request id {request_id!r}: expected SESSION:XXXXXXXX")
    return validate_name(session, "request id's session")


def control_socket(session: str) -> Path:
    return session_path(session) / CONTROL_SOCKET


@contextlib.contextmanager
def short_path(path: Path) -> Iterator[Path]:
    """``path`` reached through a descriptor of its directory (``/proc/self/fd/N/name``):
    Unix socket paths are limited to 108 bytes, and a deep ``$XDG_RUNTIME_DIR`` (or a
    test's temporary dir) exceeds that."""
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield Path(f"/proc/self/fd/{fd}") / path.name
    finally:
        os.close(fd)


def connect(session: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with short_path(control_socket(session)) as path:
            sock.connect(str(path))
    except OSError as exc:
        sock.close()
        raise SandbridgeError(
            f"session {session!r} does not serve terminals ({exc.strerror})"
        ) from None
    return sock


def parse_answer(line: bytes) -> dict[str, Any]:
    """One answer line; raise ControlError for a refusal."""
    if not line:
        raise SandbridgeError("the session closed the control connection")
    try:
        answer = decode_json(line)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise SandbridgeError("the session sent a malformed answer")
    if not answer.get("ok"):
        raise ControlError(str(answer.get("code")), str(answer.get("error")))
    return answer


def call(session: str, message: dict[str, Any]) -> dict[str, Any]:
    """Send one control request to ``session``; return its answer or raise ControlError."""
    with connect(session) as sock, sock.makefile("rwb") as file:
        file.write(json.dumps(message).encode() + b"\n")
        file.flush()
        return parse_answer(file.readline(MAX_ANSWER))
