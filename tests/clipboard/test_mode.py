"""``--clipboard`` and ``--clipboard-window`` values (clipboard/mode.py): the pure parse
the owner's config key is to share."""

from __future__ import annotations

import pytest

from sandbridge.clipboard.mode import ClipboardMode, ClipboardSettings, parse_mode, parse_window
from sandbridge.exceptions import PolicyError


@pytest.mark.parametrize(
    ("value", "mode"), [("read", ClipboardMode.READ), ("readwrite", ClipboardMode.READWRITE)]
)
def test_a_mode_is_parsed(value: str, mode: ClipboardMode) -> None:
    assert parse_mode(value) is mode


@pytest.mark.parametrize("value", ["write", "all", "", "READ", "on"])
def test_any_other_mode_is_refused_by_name(value: str) -> None:
    with pytest.raises(PolicyError, match=f"--clipboard {value!r}: not a clipboard mode"):
        parse_mode(value)


def test_a_refusal_names_the_config_line_it_came_from() -> None:
    with pytest.raises(PolicyError, match="config:3 'yes': not a clipboard mode"):
        parse_mode("yes", "config:3")


def test_only_readwrite_writes() -> None:
    assert ClipboardSettings(ClipboardMode.READWRITE).writes
    assert not ClipboardSettings(ClipboardMode.READ).writes


@pytest.mark.parametrize("value", ["0", "-5", "3601", "nan", "2m", "inf"])
def test_a_window_out_of_range_is_refused_by_name(value: str) -> None:
    with pytest.raises(PolicyError, match=f"--clipboard-window {value!r}: not a number"):
        parse_window(value)


def test_a_window_in_seconds_is_parsed() -> None:
    assert parse_window("2.5") == 2.5
