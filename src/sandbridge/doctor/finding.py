"""What one check of ``sandbridge doctor`` found, and how the findings add up."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass


class Status(enum.Enum):
    """How a part stands on this machine."""

    OK = "ok"
    # Works in part or not at all, but sandbridge runs without it (the daemon's unit,
    # the front door, a desktop browser).
    WARN = "warn"
    # Something the core needs is missing: `sandbridge run` cannot work here.
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Finding:
    """One check's answer: the part, how it stands, what was found, and what to do (empty
    when there is nothing to do)."""

    name: str
    status: Status
    found: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        """The finding as ``--json`` prints it."""
        return {
            "name": self.name,
            "status": self.status.value,
            "found": self.found,
            "fix": self.fix,
        }


# A check: asks this machine about one part, never changes anything.
Check = Callable[[], Finding]


def run_checks(checks: Iterable[Check]) -> list[Finding]:
    """Every check's finding, in order; a check that raises is a failed finding naming
    the error (one broken check never hides the others)."""
    findings = []
    for check in checks:
        try:
            findings.append(check())
        except Exception as exc:  # a check's own bug: reported, not a traceback
            name = check.__name__.strip("_").replace("_", " ")
            findings.append(Finding(name, Status.FAIL, f"the check failed: {exc!r:.200}"))
    return findings


def core_missing(findings: Iterable[Finding]) -> bool:
    """Whether something the core needs is missing (``doctor``'s exit status)."""
    return any(finding.status is Status.FAIL for finding in findings)
