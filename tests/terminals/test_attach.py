"""The attach client's pure parts; the client end to end is ``test_terminal_e2e.py``."""

from __future__ import annotations

import pytest

from sandbridge.terminals.attach import Ending, describe


@pytest.mark.parametrize(
    ("reason", "shown"),
    [
        ("\x1b]52;c;ZWNobyBwd25lZA==\x07", "terminal ended: ?]52;c;ZWNobyBwd25lZA==?"),
        ("revoked\n\x1b[1Asandbridge: ok", "terminal ended: revoked??[1Asandbridge: ok"),
        ("expired\u202etxt.exe", "terminal ended: expired?txt.exe"),
        ("x" * 100, "terminal ended: " + "x" * 64),
    ],
)
def test_a_hostile_end_reason_is_shown_as_one_printable_line(reason: str, shown: str) -> None:
    # The worker (inside the sandbox) chooses an EXIT's reason, a far host a STOP's.
    assert describe(Ending(reason, 255)) == shown


def test_a_shells_exit_is_described_with_its_status() -> None:
    assert describe(Ending("exit", 3)) == "terminal ended: the shell exited with status 3"
