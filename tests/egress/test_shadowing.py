"""Entries that never decide: covered by an earlier entry, or repeated."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbridge.egress.shadowing import covers, policy_warnings, unreached_entries
from sandbridge.project.policy import Rule, load_policy


def rule(text: str, source: str = "--allow") -> Rule:
    [parsed] = load_policy(Path("/nonexistent"), allow=[text]).rules
    return Rule(parsed.host, parsed.port, parsed.private, source)


@pytest.mark.parametrize(
    ("first", "later", "covered"),
    [
        ("pkgs.test", "pkgs.test", True),
        ("pkgs.test", "pkgs.test private", True),
        ("pkgs.test private", "pkgs.test", True),
        ("pkgs.test", "pkgs.test:443", True),
        ("pkgs.test", "pkgs.test:8443", True),
        ("pkgs.test", "pkgs.test:8080", False),
        ("pkgs.test:443", "pkgs.test", False),  # the later one also allows 80 and 8443
        ("pkgs.test:443", "pkgs.test:443 private", True),
        ("*.corp.test", "pkgs.corp.test", True),
        ("*.corp.test", "corp.test", False),
        ("*.corp.test", "*.a.corp.test", True),
        ("*.corp.test", "*.corp.test", True),
        ("*.a.corp.test", "*.corp.test", False),
        ("pkgs.corp.test", "*.corp.test", False),
        ("other.test", "pkgs.test", False),
        ("203.0.113.7", "203.0.113.7:443", True),
        ("[2001:db8::1]", "[2001:db8:0::1]:443", True),
        ("203.0.113.7", "203.0.113.8", False),
    ],
)
def test_which_entry_covers_which(first: str, later: str, covered: bool) -> None:
    assert covers(rule(first), rule(later)) is covered


def test_a_private_entry_below_the_plain_one_is_reported_naming_both_lines(
    tmp_path: Path,
) -> None:
    (tmp_path / ".sandbridge").mkdir()
    (tmp_path / ".sandbridge" / "allow").write_text(
        "# python\npkgs.test\nother.test\npkgs.test private\n"
    )
    [warning] = policy_warnings(load_policy(tmp_path))
    assert warning == (
        ".sandbridge/allow:4: 'pkgs.test private' is never reached: its 'private' takes no "
        "effect: 'pkgs.test' (.sandbridge/allow:2) comes first and matches every destination "
        "it does (the first matching entry decides); edit .sandbridge/allow:2 instead, or "
        "remove .sandbridge/allow:4"
    )


def test_an_exact_repeat_is_reported_as_a_duplicate_once(tmp_path: Path) -> None:
    (tmp_path / ".sandbridge").mkdir()
    (tmp_path / ".sandbridge" / "allow").write_text("pkgs.test\npkgs.test\n")
    policy = load_policy(tmp_path, allow=["pkgs.test"])
    found = unreached_entries(policy.rules)
    assert [(u.entry.source, u.hidden_by.source, u.duplicate) for u in found] == [
        (".sandbridge/allow:2", ".sandbridge/allow:1", True),
        ("--allow", ".sandbridge/allow:1", True),
    ]
    assert policy_warnings(policy)[0] == (
        ".sandbridge/allow:2: 'pkgs.test' repeats 'pkgs.test' (.sandbridge/allow:1), which "
        "decides first; remove one of them"
    )


def test_entries_that_each_decide_something_give_no_warning() -> None:
    policy = load_policy(
        Path("/nonexistent"),
        allow=["pkgs.test:443 private", "pkgs.test", "*.corp.test", "corp.test", "gate:5432"],
    )
    assert policy_warnings(policy) == []
