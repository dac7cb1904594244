"""What a client inside the sandbox sends on ``relay.sock`` and how it reads the answer:
the contract's ``register`` (``ags-webview-url``, ``--publish PORT``), auto-publish's
``register`` with ``process`` and ``auto`` and its ``unregister``
(:mod:`sandbridge.protocol.auto_registration` says what they mean).

The host's side, which parses and validates these requests, lives in
:mod:`sandbridge.protocol.registration` and :mod:`sandbridge.protocol.auto_registration`
and takes every name here from this module. Kept apart from them because the sandbox
entry publishes ports without an event loop and under a memory bound: this module
imports ``json`` alone (no ``dataclasses``, which loads ``inspect`` and ``ast``).
"""

from __future__ import annotations

from sandbridge.protocol.jsonline import decode_json, encode_object

# ``/proc/PID/comm`` holds at most 15 bytes; 64 leaves room for a longer name from
# elsewhere and keeps every line that prints one short.
MAX_PROCESS_NAME = 64
UNKNOWN_PROCESS = "unknown"
# The refusal when a session is full starts with this (session/host.py words it, the
# auto-publisher recognises it: it then stops trying new ports until an app goes).
APPS_LIMIT_PREFIX = "this session already has "
# The refusal of a port past auto-publish's rate of new apps (protocol/limits.py) starts
# with this: the auto-publisher then offers it, and the rest of its scan, again later.
AUTO_RATE_PREFIX = "too many new ports to publish at once: "
UNREGISTER = "unregister"
# The relay answers within its own 5 s read timeout; a client waits a little longer.
ANSWER_TIMEOUT = 10.0
# Every answer on relay.sock is one short line; a client reads no more than this.
MAX_ANSWER_BYTES = 4096


def encode_register_request(port: int, base_path: str = "/") -> bytes:
    """The request line ``ags-webview-url`` sends."""
    return encode_object({"type": "register", "port": port, "base_path": base_path})


def encode_auto_register_request(port: int, process: str) -> bytes:
    """The request auto-publish sends: the contract's fields, then its own two."""
    return encode_object(
        {"type": "register", "port": port, "base_path": "/", "process": process, "auto": True}
    )


def encode_unregister_request(host_port: int) -> bytes:
    return encode_object({"type": UNREGISTER, "host_port": host_port})


def process_name(raw: str) -> str:
    """A name the host accepts, made from whatever the sandbox's ``/proc`` said:
    printable ASCII kept, anything else ``?``, cut to the limit; ``unknown`` if empty."""
    cleaned = "".join(ch if " " <= ch <= "~" else "?" for ch in raw.strip())
    return cleaned[:MAX_PROCESS_NAME] or UNKNOWN_PROCESS


def answer_complete(answer: bytes) -> bool:
    """Whether a client has read all it reads of an answer: its line, or the limit."""
    return b"\n" in answer or len(answer) >= MAX_ANSWER_BYTES


def decode_answer(answer: bytes) -> dict[str, object]:
    """The answer a client read (up to its end of stream or :func:`answer_complete`);
    raise ``ValueError`` naming what came if it is no JSON object."""
    value = decode_json(answer)
    if not isinstance(value, dict):
        raise ValueError(f"relay answered {answer[:200]!r}")
    return value
