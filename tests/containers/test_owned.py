"""The session's own objects: named by full id, unique prefix or name; nothing else."""

from __future__ import annotations

import pytest

from sandbridge.containers.endpoints import Owned
from sandbridge.containers.owned import MIN_PREFIX, OwnedObjects
from sandbridge.exceptions import ContainerRefused

MINE = "a" * 12 + "1" * 52
ALSO = "a" * 12 + "2" * 52


def _owned() -> OwnedObjects:
    owned = OwnedObjects()
    owned.add(Owned.CONTAINER, MINE, "/web")
    owned.add(Owned.CONTAINER, ALSO, "db")
    return owned


def test_an_object_is_named_by_id_name_or_unique_prefix() -> None:
    owned = _owned()
    assert owned.resolve(Owned.CONTAINER, MINE) == MINE
    assert owned.resolve(Owned.CONTAINER, "web") == MINE
    assert owned.resolve(Owned.CONTAINER, "/db") == ALSO
    assert owned.resolve(Owned.CONTAINER, MINE[:14]) == MINE


@pytest.mark.parametrize(
    "ref",
    ["a" * 12, "a" * (MIN_PREFIX - 1), "b" * 64, "other", "", "1" * 52],
)
def test_anything_else_is_refused(ref: str) -> None:
    with pytest.raises(ContainerRefused) as refused:
        _owned().resolve(Owned.CONTAINER, ref)
    assert (refused.value.field, refused.value.rule) == ("path.container", "own-objects-only")


def test_kinds_are_kept_apart_and_a_forgotten_object_is_no_longer_named() -> None:
    owned = _owned()
    with pytest.raises(ContainerRefused):
        owned.resolve(Owned.EXEC, MINE)
    owned.forget(Owned.CONTAINER, MINE)
    with pytest.raises(ContainerRefused):
        owned.resolve(Owned.CONTAINER, "web")
    assert owned.ids(Owned.CONTAINER) == [ALSO]
