"""A session's open terminal requests, kept across a restart of the daemon serving it.

The broker writes its instance, every pending request (its signed document, as the
requester sent it), the nonces of the requests it took lately (a copy of one stays
refused) and the keys the owner allowed for this session only to
``terminals.json`` in the session's host-only directory after each change; a daemon
that serves the session again reads it back, verifies each document again for the same
session and instance (and its requester as still allowed), and the owner finds the
requests as they were. The file lives exactly as long as the session (the ``run`` client removes
its directory), so an approval can never reach a later session of the same name: that
one has a new instance.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from sandbridge.protocol.jsonline import decode_json

FILE = "terminals.json"
# A request id: ``SESSION:`` and this many lower-case hex digits.
REQUEST_ID_HEX = 8
# 64 open requests of a few KiB each (their signed documents), with room to spare.
MAX_FILE_BYTES = 1024 * 1024
# A time read back is a float; a longer integer is no time (and float() would raise).
FLOAT_LIMIT = 2**1023


@dataclass(frozen=True, slots=True)
class Pending:
    """What a restarted broker needs: its instance and the open requests' documents."""

    instance: str
    requests: tuple[tuple[str, object], ...] = ()
    # Keys the owner allowed for this session only (``sandbridge terminal allow``): a
    # request one of them made is attachable after the restart too.
    requesters: tuple[str, ...] = ()
    # The nonces of the requests taken lately and until when a copy of each is refused
    # (a restart must not take a copy of a request the owner just denied).
    taken: tuple[tuple[str, float], ...] = ()


def save(path: Path, pending: Pending) -> None:
    """Write ``pending`` to ``path`` whole (a temporary file renamed over it), 0600."""
    data = json.dumps(
        {
            "instance": pending.instance,
            "requests": pending.requests,
            "requesters": pending.requesters,
            "taken": pending.taken,
        }
    )
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(data)
    os.replace(temporary, path)


def load(path: Path) -> Pending | None:
    """What :func:`save` wrote at ``path``; None if nothing (or nothing usable) is there."""
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
        data = decode_json(raw, max_bytes=MAX_FILE_BYTES)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("instance"), str):
        return None
    requests = data.get("requests")
    if not isinstance(requests, list):
        return None
    kept = tuple(
        (item[0], item[1])
        for item in requests
        if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
    )
    requesters = data.get("requesters", [])
    taken = data.get("taken", [])
    if not isinstance(requesters, list) or not isinstance(taken, list):
        return None
    return Pending(
        data["instance"], kept, tuple(key for key in requesters if isinstance(key, str)),
        tuple(
            (item[0], float(item[1])) for item in taken
            if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
            and isinstance(item[1], int | float) and not isinstance(item[1], bool)
            and abs(item[1]) < FLOAT_LIMIT
        ),
    )  # fmt: skip


def names_request_of(request_id: str, session: str) -> bool:
    """Whether ``request_id`` (read back from the file, never trusted) has the shape of an
    id a broker of ``session`` makes."""
    prefix, _, token = request_id.partition(":")
    hex_digits = all(char in "0123456789abcdef" for char in token)
    return prefix == session and len(token) == REQUEST_ID_HEX and hex_digits
