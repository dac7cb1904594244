"""``sandbridge egress``: what the owner sees when there is nothing to answer, or when a
command names no request (the answers themselves: tests/egress/test_requests_in_sandbox.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import SANDBRIDGE


def egress(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SANDBRIDGE, "egress", *args], capture_output=True, text=True, check=False
    )


def test_nothing_pending_without_sessions(xdg: Path) -> None:
    result = egress("pending")
    assert (result.returncode, result.stdout) == (0, "no pending egress requests\n")
    assert egress("pending", "--json").stdout == "[]\n"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("approve", "not-an-id"), "request id 'not-an-id': expected SESSION:XXXXXXXX"),
        (("deny", "s-1:zz"), "request id 's-1:zz': expected SESSION:XXXXXXXX"),
        (("approve", "s-1:00000000", "--once", "--session"), "not allowed with argument"),
        (("pending", "--session", "../x"), "'../x'"),
    ],
)
def test_a_bad_argument_is_refused_naming_it(xdg: Path, args: tuple[str, ...], error: str) -> None:
    result = egress(*args)
    assert result.returncode == 2
    assert error in result.stderr


def test_a_session_that_is_not_running_is_named(xdg: Path) -> None:
    result = egress("approve", "s-gone:00000000")
    assert result.returncode == 2
    assert "s-gone" in result.stderr
