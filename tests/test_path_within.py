"""``is_within`` (path_within.py), the start's fast ``is_relative_to``: the same answer
as ``PurePath.is_relative_to`` on generated paths, relative and absolute, with ``.``,
``..``, empty and doubled separators."""

from __future__ import annotations

from pathlib import PurePosixPath

from hypothesis import given
from hypothesis import strategies as st

from sandbridge.path_within import is_within

PARTS = st.lists(st.sampled_from(["a", "b", "..", ".", "a.b", "", "/", "//"]), max_size=5)


@given(PARTS, PARTS, st.sampled_from(["/", ".", "//", ""]))
def test_is_within_answers_as_is_relative_to(top: list[str], rest: list[str], base: str) -> None:
    start = PurePosixPath(base)
    inner, outer = start.joinpath(*top, *rest), start.joinpath(*top)
    for path, other in (
        (inner, outer),
        (outer, inner),
        (inner, PurePosixPath("/")),
        (outer, start),
        (PurePosixPath("/".join(rest)), outer),
    ):
        assert is_within(path, other) == path.is_relative_to(other), (path, other)
