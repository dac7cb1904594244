"""The daemon socket's messages (docs/daemon.md), sans-I/O.

The socket is ``SOCK_SEQPACKET``: one message is one JSON object, whole or not at all.
The client sends one request, with the session's descriptors attached (its runtime
dir, its session dir, and the host's end of the terminal channel when it has one)::

    {"version": 1, "serve": {...options...}, "runtime_dir": PATH, "session_dir": PATH}

and the daemon answers with events, one per message, until either side leaves:
``{"ready": SESSION_ID}`` once the session is served, ``{"app": {...}}`` for each
registration, ``{"gone": {...}}`` for an app that stopped listening, ``{"say": TEXT}``
for a line the owner should see, and ``{"error": TEXT}`` (then the daemon closes) for a
refusal. The client leaving ends the session.

``sandbridge ui`` sends ``{"version": 1, "dashboard": "url"}`` instead, with no
descriptor, and gets one ``{"dashboard": URL}`` (a new one-time login URL of the
dashboard the daemon serves) or ``{"error": TEXT}``, then the close.
"""

from __future__ import annotations

import enum
import json
from typing import Any

from sandbridge.exceptions import DaemonError, JsonRefused
from sandbridge.protocol.jsonline import decode_json

VERSION = 1
# A request carries the session's options (a policy of a few hundred lines at most); an
# event carries one app or one line of text. One message must fit the socket's send
# buffer (about 200 KiB by default) whole.
MAX_MESSAGE_BYTES = 64 * 1024
# Descriptors a request may carry: runtime dir, session dir, terminal channel.
MAX_REQUEST_FDS = 3
# The key of a dashboard request (and of its answer).
DASHBOARD_KEY = "dashboard"


class Event(enum.Enum):
    """What one message from the daemon says."""

    READY = "ready"
    APP = "app"
    GONE = "gone"
    SAY = "say"
    ERROR = "error"
    STOP = "stop"  # the owner asked the session to end (control socket's ``stop``)
    DASHBOARD = "dashboard"  # the answer to a dashboard request: a one-time login URL


def encode(message: dict[str, Any]) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE_BYTES:
        raise DaemonError(f"a daemon message of {len(data)} bytes is over {MAX_MESSAGE_BYTES}")
    return data


def event(kind: Event, value: object) -> bytes:
    return encode({kind.value: value})


def decode(data: bytes) -> dict[str, Any]:
    """One message as an object; :class:`DaemonError` says why not."""
    try:
        message = decode_json(data, max_bytes=MAX_MESSAGE_BYTES)
    except JsonRefused as exc:
        raise DaemonError(str(exc)) from None
    if not isinstance(message, dict):
        raise DaemonError("a daemon message must be a JSON object")
    return message


def decode_event(data: bytes) -> tuple[Event, object]:
    """The event of one message from the daemon."""
    message = decode(data)
    if len(message) != 1:
        raise DaemonError(f"a daemon event has one key, got {sorted(message)!r:.80}")
    ((key, value),) = message.items()
    try:
        return Event(key), value
    except ValueError:
        raise DaemonError(f"unknown daemon event {key!r:.40}") from None


def _versioned(data: bytes) -> dict[str, Any]:
    message = decode(data)
    if message.get("version") != VERSION:
        raise DaemonError(
            f"protocol version {message.get('version')!r:.20} is not {VERSION}: the daemon "
            "and this sandbridge differ; restart the daemon"
        )
    return message


def asks_for_dashboard(data: bytes) -> bool:
    """Whether a request asks for a dashboard URL (anything else is a session's request);
    a dashboard request holds nothing else."""
    message = _versioned(data)
    if DASHBOARD_KEY not in message:
        return False
    if message != dashboard_message():
        raise DaemonError(
            f"a dashboard request is {json.dumps(dashboard_message())} and nothing else"
        )
    return True


def dashboard_message() -> dict[str, Any]:
    return {"version": VERSION, DASHBOARD_KEY: "url"}


def decode_request(data: bytes) -> tuple[dict[str, Any], str, str]:
    """A request's options, runtime dir and session dir."""
    message = _versioned(data)
    options, runtime_dir, session_dir = (
        message.get(key) for key in ("serve", "runtime_dir", "session_dir")
    )
    if not isinstance(options, dict):
        raise DaemonError("a daemon request needs its session's options under 'serve'")
    if not isinstance(runtime_dir, str) or not isinstance(session_dir, str):
        raise DaemonError("a daemon request needs 'runtime_dir' and 'session_dir' paths")
    return options, runtime_dir, session_dir


def request(options: dict[str, Any], runtime_dir: str, session_dir: str) -> bytes:
    return encode(
        {
            "version": VERSION,
            "serve": options,
            "runtime_dir": runtime_dir,
            "session_dir": session_dir,
        }
    )
