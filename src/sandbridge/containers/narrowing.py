"""What the sandbox sees of the engine: lists of the session's own objects, the listed
images, and the engine's info without the host's details.

A list's query gets the session's label filter added to the client's own (the engine
ANDs label filters: nothing the client adds can widen it); the images list is narrowed to
the listed images by the ``reference`` filter. The engine's ``/info`` names the host's
containers, images, paths, registries and proxies: the bridge keeps the few fields a
client asks it for (the engine's version, the kernel, the machine's size).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from sandbridge.containers.create_policy import SESSION_LABEL
from sandbridge.containers.settings import normalise_image
from sandbridge.exceptions import ContainerRefused
from sandbridge.protocol.jsonline import decode_json

# The engine's info fields a client may see: which engine and kernel, how big the machine.
INFO_FIELDS = frozenset(
    {
        "ServerVersion",
        "OSType",
        "Architecture",
        "NCPU",
        "MemTotal",
        "KernelVersion",
        "OperatingSystem",
        "OSVersion",
        "Driver",
        "CgroupDriver",
        "CgroupVersion",
        "DefaultRuntime",
        "ExperimentalBuild",
    }
)
# A filters value is a few short lists; more is no client's.
MAX_FILTERS_BYTES = 8 * 1024


def _filters(query: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """The client's ``filters`` (either of the API's two forms) as lists."""
    found: dict[str, list[str]] = {}
    for name, value in query:
        if name != "filters":
            continue
        try:
            parsed = decode_json(value, max_bytes=MAX_FILTERS_BYTES)
        except ValueError:
            raise ContainerRefused("query.filters", "malformed-request", "not JSON", 400) from None
        if not isinstance(parsed, dict):
            raise ContainerRefused("query.filters", "malformed-request", "not an object", 400)
        for key, given in parsed.items():
            # {"label": ["a=b"]}, or the older {"label": {"a=b": true}}
            values = (
                [k for k, on in given.items() if on is True] if isinstance(given, dict) else given
            )
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise ContainerRefused(
                    f"query.filters.{key[:50]}", "malformed-request", "not a list of strings", 400
                )
            found.setdefault(key, []).extend(values)
    return found


def _with(query: Iterable[tuple[str, str]], filters: dict[str, list[str]]) -> list[tuple[str, str]]:
    kept = [(name, value) for name, value in query if name != "filters"]
    return [*kept, ("filters", json.dumps(filters, separators=(",", ":")))]


def session_list(query: Iterable[tuple[str, str]], session: str) -> list[tuple[str, str]]:
    """A list's query narrowed to the session's own objects."""
    pairs = list(query)
    filters = _filters(pairs)
    filters.setdefault("label", []).append(f"{SESSION_LABEL}={session}")
    return _with(pairs, filters)


def listed_images(
    query: Iterable[tuple[str, str]], images: frozenset[str]
) -> list[tuple[str, str]]:
    """The images list's query narrowed to the listed images (a client's own
    ``reference`` filter may narrow it further, to listed images only)."""
    pairs = list(query)
    filters = _filters(pairs)
    asked = filters.get("reference")
    if asked is not None:
        for reference in asked:
            if normalise_image(reference) not in images:
                raise ContainerRefused(
                    "query.filters.reference",
                    "image-not-listed",
                    f"{reference[:100]!r} is not an image the owner listed",
                )
    else:
        filters["reference"] = sorted(images)
    return _with(pairs, filters)


def engine_info(body: bytes) -> bytes:
    """The engine's info cut to :data:`INFO_FIELDS` (anything else but an object: ``{}``)."""
    try:
        info = decode_json(body, max_bytes=len(body) + 1)
    except ValueError:
        info = {}
    kept = {k: v for k, v in info.items() if k in INFO_FIELDS} if isinstance(info, dict) else {}
    return json.dumps(kept).encode()
