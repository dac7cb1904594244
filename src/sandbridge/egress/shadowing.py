"""Entries of a policy that never decide anything (sans-I/O).

The first matching entry decides a destination (:func:`sandbridge.egress.decision.
match_destination`), so a later entry that matches nothing the earlier one does not is
never reached: ``pkgs.test private`` written below ``pkgs.test`` changes nothing, and the
owner who added it believes otherwise. :func:`unreached_entries` finds every such entry
(and the plain repeats), so that where a policy is loaded and printed each is named with
the line that hides it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sandbridge.project.policy import DEFAULT_PORTS, Policy, Rule, host_matches


@dataclass(frozen=True, slots=True)
class Unreached:
    """An entry that never decides, and the earlier entry that decides in its place."""

    entry: Rule
    hidden_by: Rule

    @property
    def duplicate(self) -> bool:
        """The same entry twice (not only one covering the other)."""
        return self.entry.text == self.hidden_by.text

    @property
    def warning(self) -> str:
        """One line naming both entries by their source and what to do."""
        entry, first = self.entry, self.hidden_by
        if self.duplicate:
            return (
                f"{entry.source}: '{entry.text}' repeats '{first.text}' ({first.source}), "
                "which decides first; remove one of them"
            )
        what = "is never reached"
        if entry.private and not first.private:
            what += ": its 'private' takes no effect"
        return (
            f"{entry.source}: '{entry.text}' {what}: '{first.text}' ({first.source}) comes "
            "first and matches every destination it does (the first matching entry "
            f"decides); edit {first.source} instead, or remove {entry.source}"
        )


def _ports(rule: Rule) -> frozenset[int]:
    return DEFAULT_PORTS if rule.port is None else frozenset({rule.port})


def covers(first: Rule, later: Rule) -> bool:
    """True if ``first`` matches every (host, port) that ``later`` matches."""
    if not _ports(later) <= _ports(first):
        return False
    if later.host.startswith("*."):  # every name under the suffix: first must be a wildcard
        return first.host.startswith("*.") and (
            later.host == first.host or host_matches(first.host, later.host[2:])
        )
    return host_matches(first.host, later.host)


def unreached_entries(rules: Sequence[Rule]) -> list[Unreached]:
    """Each entry of ``rules`` (in policy order) that an earlier one covers, with the
    first entry that covers it."""
    found: list[Unreached] = []
    for index, later in enumerate(rules):
        for first in rules[:index]:
            if covers(first, later):
                found.append(Unreached(later, first))
                break
    return found


def policy_warnings(policy: Policy) -> list[str]:
    """The warnings ``sandbridge run`` and ``--print-policy`` print for ``policy``."""
    return [unreached.warning for unreached in unreached_entries(policy.rules)]
