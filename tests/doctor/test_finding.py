"""How ``sandbridge doctor``'s findings are gathered and add up."""

from __future__ import annotations

from sandbridge.doctor.finding import Finding, Status, core_missing, run_checks


def _fine() -> Finding:
    return Finding("fine part", Status.OK, "here")


def _broken_check() -> Finding:
    raise RuntimeError("the check's own bug")


def test_a_check_that_raises_is_a_failed_finding_naming_the_error() -> None:
    findings = run_checks([_broken_check, _fine])
    assert findings[0].name == "broken check"
    assert findings[0].status is Status.FAIL
    assert 'RuntimeError("the check\'s own bug")' in findings[0].found
    assert findings[1] == _fine()  # the other checks still run


def test_only_a_failed_finding_means_the_core_is_missing() -> None:
    warned = Finding("front door", Status.WARN, "off", "install gcc")
    assert not core_missing([_fine(), warned])
    assert core_missing([_fine(), warned, Finding("sandbox backend", Status.FAIL, "none")])


def test_a_finding_as_json_has_its_four_fields() -> None:
    finding = Finding("front door", Status.WARN, "off", "install gcc")
    assert finding.to_json() == {
        "name": "front door",
        "status": "warn",
        "found": "off",
        "fix": "install gcc",
    }
