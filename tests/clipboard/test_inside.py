"""The stand-ins' command lines (clipboard/inside.py): the flags agents use are read,
every other flag is refused by name."""

from __future__ import annotations

import subprocess

import pytest

from sandbridge.clipboard.inside import Invocation, parse_invocation
from sandbridge.exceptions import ClipboardRefused
from tests.conftest import PYTHON


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["xclip", "-selection", "clipboard", "-o"], Invocation("read", "text/plain")),
        (
            ["xclip", "-selection", "clipboard", "-o", "-t", "image/png"],
            Invocation("read", "image/png"),
        ),
        (["xclip", "-sel", "c", "-o", "-t", "UTF8_STRING"], Invocation("read", "text/plain")),
        (["xclip", "-selection", "clipboard", "-o", "-t", "TARGETS"], Invocation("types")),
        (["xclip", "-selection", "clipboard", "-i"], Invocation("write", "text/plain")),
        (["xclip", "-selection", "clipboard"], Invocation("write", "text/plain")),
        (
            ["xclip", "-selection", "clipboard", "-t", "image/png", "-i"],
            Invocation("write", "image/png"),
        ),
        (["xsel", "--clipboard", "--output"], Invocation("read")),
        (["xsel", "-b", "-o"], Invocation("read")),
        (["xsel", "--clipboard", "--input"], Invocation("write")),
        (["wl-paste"], Invocation("read", "text/plain", newline=True)),
        (["wl-paste", "-n"], Invocation("read", "text/plain")),
        (["wl-paste", "--type", "image/png"], Invocation("read", "image/png")),
        (
            ["wl-paste", "--type=text/plain;charset=utf-8"],
            Invocation("read", "text/plain", newline=True),
        ),
        (["wl-paste", "--list-types"], Invocation("types")),
        (["wl-copy"], Invocation("write", "text/plain")),
        (["wl-copy", "--type", "image/png"], Invocation("write", "image/png")),
    ],
)
def test_the_flags_agents_use_are_read(argv: list[str], expected: Invocation) -> None:
    assert parse_invocation(argv[0], argv[1:]) == expected


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (["xclip", "-selection", "primary", "-o"], "selection 'primary' is not served"),
        (["xclip", "-display", ":0", "-o"], "flag '-display' is not served"),
        (["xclip", "-o", "-t", "text/html"], "type 'text/html' is not carried"),
        (["xsel", "--primary", "-o"], "flag '--primary' is not served"),
        (["xsel", "--clipboard", "--clear"], "flag '--clear' is not served"),
        (["wl-paste", "--primary"], "flag '--primary' is not served"),
        (["wl-paste", "--watch", "cat"], "flag '--watch' is not served"),
        (["wl-copy", "--clear"], "flag '--clear' is not served"),
        (["wl-copy", "--type", "application/x-evil"], "type 'application/x-evil' is not carried"),
    ],
)
def test_any_other_flag_is_refused_by_name(argv: list[str], refusal: str) -> None:
    with pytest.raises(ClipboardRefused, match=refusal):
        parse_invocation(argv[0], argv[1:])


def test_a_refused_flag_is_one_line_and_status_2() -> None:
    result = subprocess.run(
        [PYTHON, "-m", "sandbridge.clipboard.inside", "xclip", "-selection", "primary", "-o"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == (
        "xclip: selection 'primary' is not served; only clipboard "
        "(sandbridge's clipboard stand-in)\n"
    )
