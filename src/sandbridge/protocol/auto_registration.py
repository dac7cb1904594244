"""What auto-publish adds to the registration socket (docs/contract.md), kept apart from
the contract's own ``register`` message.

Two optional fields of ``register``: ``"process"``, the name of the process that
listens (``sandbridge ls`` shows it), and ``"auto": true``, saying that auto-publish
made the registration (the host then checks the owner's publish rules, and the app may
be unregistered). A request without them is the contract's and is answered byte for
byte as before; the answer never carries them.

One new message, for registrations made with ``"auto": true`` only:
``{"type":"unregister","host_port":43125}`` closes that app's host listener and is
answered ``{"ok":true,"host_port":43125}``; any other app is refused, so a registration
made by ``ags-webview-url`` (or any contract client) is never taken away this way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbridge.exceptions import RegistrationError, WireError
from sandbridge.protocol.jsonline import decode_object, encode_object

# The client's side (what the sandbox sends: the requests, the process name it gives,
# the session-full refusal it recognises) is protocol/sandbox_requests.py.
from sandbridge.protocol.sandbox_requests import MAX_PROCESS_NAME, UNREGISTER

# How much of a refused value an error repeats: enough to recognise it.
_SHOWN_VALUE = 80


@dataclass(frozen=True, slots=True)
class PublishedBy:
    """The optional fields of a ``register`` message."""

    process: str | None = None
    auto: bool = False


@dataclass(frozen=True, slots=True)
class UnregisterRequest:
    """Close the auto-published app served at ``host_port``."""

    host_port: int


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_VALUE else f"{text[:_SHOWN_VALUE]}..."


def validate_process_name(value: object) -> str:
    """Return ``value`` if it is 1..64 printable ASCII characters (it is printed on the
    owner's terminal: no control character, no escape sequence)."""
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_PROCESS_NAME
        or not all(" " <= ch <= "~" for ch in value)
    ):
        raise RegistrationError(
            f"process must be 1..{MAX_PROCESS_NAME} printable ASCII characters, got {_shown(value)}"
        )
    return value


def parse_published_by(message: dict[str, Any]) -> PublishedBy:
    """The optional ``process`` and ``auto`` fields of a decoded ``register`` message."""
    process = message.get("process")
    auto = message.get("auto", False)
    if not isinstance(auto, bool):
        raise RegistrationError(f"auto must be true or false, got {_shown(auto)}")
    return PublishedBy(None if process is None else validate_process_name(process), auto)


def parse_unregister_request(line: bytes) -> UnregisterRequest | None:
    """The unregister request ``line`` holds, or ``None`` if it is no unregister message
    (the registration parser then answers it, with its own refusals)."""
    try:
        message = decode_object(line)
    except WireError:
        return None
    if message.get("type") != UNREGISTER:
        return None
    return unregister_request(message)


def unregister_request(message: dict[str, Any]) -> UnregisterRequest:
    """The request of a decoded ``{"type":"unregister",...}`` message."""
    if "host_port" not in message:
        raise RegistrationError("host_port is missing: send the integer port of the app's URL")
    value = message["host_port"]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise RegistrationError(f"host_port must be an integer 1..65535, got {_shown(value)}")
    return UnregisterRequest(value)


def encode_unregister_ok(host_port: int) -> bytes:
    return encode_object({"ok": True, "host_port": host_port})
