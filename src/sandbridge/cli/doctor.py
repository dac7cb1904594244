"""``sandbridge doctor``: what works on this machine and what does not, each with its fix
(docs/doctor.md)."""

from __future__ import annotations

import argparse
import json

from sandbridge.doctor.finding import Finding, Status, core_missing, run_checks

# The status column's width: the longest status word.
STATUS_WIDTH = max(len(status.value) for status in Status)


def add_doctor(doctor: argparse.ArgumentParser) -> None:
    """``sandbridge doctor``'s arguments."""
    doctor.description = (
        "Check the sandbox backend and user namespaces, the front door, a "
        "desktop browser, a systemd user session, *.localhost names, sandbridge's "
        "directories and each agent profile's command and state. Exit status 1 only when "
        "something a session needs is missing."
    )
    doctor.add_argument("--json", action="store_true", help="print JSON for scripts")
    doctor.add_argument("-v", "--verbose", action="store_true", help="log debug events")
    doctor.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    # Only here: the checks ask every part (the sandbox, the relay, the agents).
    from sandbridge.doctor.checks import all_checks

    findings = run_checks(all_checks())
    if args.json:
        missing = core_missing(findings)
        print(json.dumps({"ok": not missing, "checks": [f.to_json() for f in findings]}))
    else:
        for finding in findings:
            print(_line(finding))
    return 1 if core_missing(findings) else 0


def _line(finding: Finding) -> str:
    """``status  name: found`` and, when there is one, the fix on the next line."""
    line = f"{finding.status.value:<{STATUS_WIDTH}}  {finding.name}: {finding.found}"
    return f"{line}\n{'':<{STATUS_WIDTH}}  fix: {finding.fix}" if finding.fix else line
