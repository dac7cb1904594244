"""The relay's tunable limits are declared once (protocol/relay_settings.py): each one's
check refuses what lies outside its bounds by name, and every other place a limit lives
(RelaySettings' defaults, the flags, the daemon wire, the docs' table, the C front
door's pool) agrees with the declaration."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from sandbridge.cli.parser import build_parser
from sandbridge.protocol.relay_settings import APP_POOL_SIZE, LIMITS, Limit, checked
from sandbridge.relay.host.settings import RelaySettings
from sandbridge.session.options import SessionOptions
from sandbridge.session.options_wire import encode
from tests.conftest import REPO

AnyLimit = Limit[float] | Limit[int]
BY_NAME = pytest.mark.parametrize("limit", LIMITS, ids=lambda limit: limit.name)


def outside(limit: AnyLimit) -> list[object]:
    """Values just past each bound, and values of no bound at all."""
    below: object = limit.minimum if limit.exclusive_minimum else limit.minimum - 1
    step = 1 if limit.kind is int else 0.001
    values = [below, limit.maximum + step, True, "8", None, float("nan"), float("inf")]
    if limit.kind is int:
        values.append(float(limit.default))  # an integer limit takes no float
    return values


def inside(limit: AnyLimit) -> list[float]:
    """The default and the values at (or next to an exclusive) each bound."""
    low = limit.minimum + 0.001 if limit.exclusive_minimum else limit.minimum
    return [limit.default, low, limit.maximum]


@BY_NAME
def test_each_limit_refuses_values_outside_its_bounds_naming_the_label_and_bounds(
    limit: AnyLimit,
) -> None:
    for value in outside(limit):
        with pytest.raises(ValueError) as caught:
            limit.check(value, "--the-label")
        assert str(caught.value) == f"--the-label must be {limit.bounds}, got {value!r}"


@BY_NAME
def test_each_limit_takes_values_at_its_bounds_as_its_type(limit: AnyLimit) -> None:
    for value in inside(limit):
        taken = limit.check(value, limit.name)
        assert taken == value and type(taken) is limit.kind


@BY_NAME
def test_a_float_limit_takes_a_whole_number(limit: AnyLimit) -> None:
    """JSON writes 75.0 back as 75 where a client wrote an int: still seconds."""
    if limit.kind is float:
        assert limit.check(int(limit.maximum), limit.name) == limit.maximum


@BY_NAME
def test_each_limit_says_its_bounds_in_words(limit: AnyLimit) -> None:
    if limit.kind is int:
        assert limit.bounds == f"an integer from {limit.minimum} to {limit.maximum}"
    else:
        assert limit.bounds == f"more than 0 and at most {limit.text(limit.maximum)} seconds"


def test_every_limit_is_declared_once_under_distinct_names() -> None:
    fields = {field.name for field in dataclasses.fields(RelaySettings)}
    for names in (
        [limit.name for limit in LIMITS],
        [limit.flag for limit in LIMITS],
        [limit.wire for limit in LIMITS],
    ):
        assert len(set(names)) == len(LIMITS), names
    assert {limit.name for limit in LIMITS} <= fields


@BY_NAME
def test_relay_settings_refuse_a_limit_out_of_bounds_however_made(limit: AnyLimit) -> None:
    for value in outside(limit)[:2]:
        changes: dict[str, Any] = {limit.name: value}
        with pytest.raises(ValueError, match=f"^{limit.name} must be "):
            RelaySettings(**changes)


def test_checked_names_the_first_value_out_of_bounds_by_its_label() -> None:
    values: dict[str, object] = {limit.wire: limit.default for limit in LIMITS}
    values["pool_size"] = 65
    with pytest.raises(ValueError, match=r"^pool_size must be an integer from 0 to 64, got 65$"):
        checked(values, lambda limit: limit.wire)


@BY_NAME
def test_defaults_are_the_same_in_the_settings_the_flags_and_the_wire(limit: AnyLimit) -> None:
    assert limit.check(limit.default, limit.name) == limit.default
    assert getattr(RelaySettings(), limit.name) == limit.default
    for command in (["run", "--", "true"], ["host", "--runtime-dir", "rt"], ["demo"]):
        args = build_parser().parse_args(command)
        assert getattr(args, limit.dest) == limit.default, command
    sent = encode(SessionOptions(workdir=REPO))
    assert sent["settings"][limit.wire] == limit.default


def test_the_pool_size_bound_is_the_c_front_doors_pool() -> None:
    """The front door (relay/front/_front.c, or wherever its C defines the pool's bound) cut a
    larger size down to its MAX_POOL without a word; the declaration refuses past it
    instead, so the two must stay equal."""
    sources = sorted((REPO / "src" / "sandbridge" / "relay").rglob("*.[ch]"))
    defined = {
        int(match)
        for source in sources
        for match in re.findall(r"^#define MAX_POOL\s+(\d+)", source.read_text(), re.M)
    }
    assert defined == {APP_POOL_SIZE.maximum}, (sources, defined)
    try:
        from sandbridge.relay.front import _front
    except ImportError:
        return  # not built here: the source above is what any build holds
    exported = getattr(_front, "MAX_POOL", APP_POOL_SIZE.maximum)
    assert exported == APP_POOL_SIZE.maximum


def _docs_row(limit: AnyLimit) -> str:
    unit = " s" if limit.kind is float else ""
    return (
        f"| `{limit.flag}` | {limit.text(limit.default)}{unit} | {limit.bounds} | `{limit.wire}` "
        f"| {limit.doc} |"
    )


def test_the_docs_settings_table_lists_exactly_the_declared_limits() -> None:
    """docs/relay.md, "Settings": one row a limit, in the declared order, with its
    default and bounds as declared (the expected table is in the failure message)."""
    text = (REPO / "docs" / "relay.md").read_text()
    section = text.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `--")]
    expected = [_docs_row(limit) for limit in LIMITS]
    assert rows == expected, "\n" + "\n".join(expected)


@BY_NAME
def test_the_docs_limits_table_says_each_flags_declared_default(limit: AnyLimit) -> None:
    """docs/relay.md, "Limits": a row that names a flag says its default too (the why
    of each number lives there), so the two tables cannot drift apart."""
    text = (REPO / "docs" / "relay.md").read_text()
    section = text.split("\n## Limits\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if f"`{limit.flag}`" in line]
    assert rows, f"no row of the Limits table names {limit.flag}"
    default = re.compile(rf"(?<![\d.]){re.escape(limit.text(limit.default))}(?![\d.])")
    for row in rows:
        assert default.search(row.split("|")[2]), row


def test_a_default_said_beside_its_flag_anywhere_in_the_docs_is_the_declared_one() -> None:
    """A number in parentheses after a flag (docs/security.md's "`--header-timeout`
    (15 s)" and the like) is the declared default."""
    said = re.compile(r"`(--[a-z-]+)` \((\d[\d.]*)(?: s)?\)")
    defaults = {limit.flag: limit.text(limit.default) for limit in LIMITS}
    wrong = [
        f"{path.name}: {flag} ({number})"
        for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
        for flag, number in said.findall(path.read_text())
        if flag in defaults and number != defaults[flag]
    ]
    assert wrong == []
