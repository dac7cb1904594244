"""The session's own containers, execs, networks and volumes: :class:`OwnedObjects`.

An object is the session's when the bridge forwarded the request that created it and the
engine answered with its id: nothing the sandbox says makes an object its own, and the
engine is never asked whose an object is (another session's, the owner's own). A path
may name an object as the Docker API allows: its full id, a prefix of it (at least
:data:`MIN_PREFIX` characters, naming one object), or its name; the bridge then sends
the full id on, so the engine acts on that object and no other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sandbridge.containers.endpoints import Owned
from sandbridge.exceptions import ContainerRefused

# A shorter id prefix than Docker's own short form (12) could name an object the session
# did not make the day it makes one more.
MIN_PREFIX = 12
# Objects a session may hold: a test suite's containers and their execs; more is a flood
# (each costs the bridge a few hundred bytes of memory).
MAX_OWNED = 4096
_ID = re.compile(r"[0-9a-f]{64}")


@dataclass(slots=True)
class _Kind:
    # full id -> names (a container's name, a network's; a volume's name is its id)
    ids: dict[str, set[str]] = field(default_factory=dict)


class OwnedObjects:
    """Which objects the session created, by kind."""

    def __init__(self) -> None:
        self._kinds: dict[Owned, _Kind] = {k: _Kind() for k in Owned if k is not Owned.IMAGE}

    def add(self, kind: Owned, object_id: str, name: str = "") -> None:
        """Record an object the engine made for the session (``name``: as asked)."""
        ids = self._kinds[kind].ids
        if object_id not in ids and sum(len(k.ids) for k in self._kinds.values()) >= MAX_OWNED:
            raise ContainerRefused(
                kind.value, "owned-limit", f"the session holds {MAX_OWNED} objects already", 429
            )
        names = ids.setdefault(object_id, set())
        if name:
            names.add(name.removeprefix("/"))

    def forget(self, kind: Owned, object_id: str) -> None:
        """The object is gone (removed by the session)."""
        self._kinds[kind].ids.pop(object_id, None)

    def ids(self, kind: Owned) -> list[str]:
        """The full ids of the session's objects of ``kind``, oldest first."""
        return list(self._kinds[kind].ids)

    def names(self, kind: Owned) -> set[str]:
        """Every name (and id) that names one of the session's objects of ``kind``."""
        return {name for i, names in self._kinds[kind].ids.items() for name in (i, *names)}

    def resolve(self, kind: Owned, ref: str) -> str:
        """The full id of the session's object ``ref`` names; refused when it names none
        of them (another session's, the owner's own, or nothing)."""
        ids = self._kinds[kind].ids
        if ref in ids:
            return ref
        named = [i for i, names in ids.items() if ref.removeprefix("/") in names]
        if len(named) == 1:
            return named[0]
        if len(ref) >= MIN_PREFIX and re.fullmatch(r"[0-9a-f]+", ref):
            prefixed = [i for i in ids if i.startswith(ref)]
            if len(prefixed) == 1:
                return prefixed[0]
        raise ContainerRefused(
            f"path.{kind.value}",
            "own-objects-only",
            f"{ref[:80]!r} is not a {kind.value} this session created",
        )


def is_full_id(text: object) -> bool:
    """Whether ``text`` is a full object id as engines answer them (64 hex digits)."""
    return isinstance(text, str) and _ID.fullmatch(text) is not None
