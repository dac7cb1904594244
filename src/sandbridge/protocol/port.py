"""The one check of a TCP port named on the wire (registrations, v1 requests, stream
and egress openings, the remote link).

Apart from :mod:`.registration` so that the sandbox entry's light shim
(:mod:`sandbridge.relay.inside.light_shim`), which checks every stream opening's port, imports
it without the registration module's imports (``dataclasses`` alone is over a MiB of
the shim's memory).
"""

from __future__ import annotations

from sandbridge.exceptions import RegistrationError


def validate_port(value: object) -> int:
    """Return ``value`` if it is an integer TCP port 1..65535."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise RegistrationError(f"port must be an integer 1..65535, got {value!r}")
    if not 1 <= value <= 65535:
        raise RegistrationError(f"port must be an integer 1..65535, got {value!r}")
    return value
