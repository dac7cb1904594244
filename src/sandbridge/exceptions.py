"""The one exception hierarchy of sandbridge.

Every error a user or a peer can cause is a :class:`SandbridgeError` whose message
says what happened, with the offending value, in one line.
"""

from __future__ import annotations


class SandbridgeError(Exception):
    """Base class of every error sandbridge raises on purpose."""


class WireError(SandbridgeError):
    """A message on one of the Unix sockets broke the wire contract."""


class JsonRefused(WireError, ValueError):
    """JSON from an untrusted side was refused before or while parsing it: too large, too
    deeply nested, not JSON. Also a ValueError, so that every caller that refuses
    malformed JSON refuses this too."""


class RegistrationError(WireError):
    """A registration request was refused; the message goes back to the sandbox."""


class HttpError(SandbridgeError):
    """An HTTP message broke the rules; ``status`` is the answer for the browser."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class UpstreamError(SandbridgeError):
    """The sandbox side of a request failed: the browser gets a 502 for that request only."""


class RuntimeDirError(SandbridgeError):
    """The session's runtime directory could not be created, checked or removed safely."""


class SandboxError(SandbridgeError):
    """The sandbox could not be started with the requested backend or options."""
