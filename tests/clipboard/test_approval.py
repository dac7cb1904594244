"""The read window (clipboard/approval.py): asked first, allowed within the window after
a yes, asked again once it has passed; preapproved never asks."""

from __future__ import annotations

from sandbridge.clipboard.approval import ReadApproval, ReadDecision


def test_the_first_read_asks() -> None:
    assert ReadApproval(120).decide(0.0) is ReadDecision.ASK


def test_reads_within_the_window_after_a_yes_are_allowed() -> None:
    approval = ReadApproval(120)
    approval.approve(10.0)
    assert approval.decide(10.0) is ReadDecision.ALLOW
    assert approval.decide(129.9) is ReadDecision.ALLOW
    assert approval.remaining(70.0) == 60.0


def test_the_first_read_after_the_window_asks_again() -> None:
    approval = ReadApproval(120)
    approval.approve(10.0)
    assert approval.decide(130.0) is ReadDecision.ASK
    assert approval.remaining(130.0) == 0.0


def test_preapproved_reads_never_ask() -> None:
    assert ReadApproval(120, preapproved=True).decide(1e9) is ReadDecision.ALLOW
