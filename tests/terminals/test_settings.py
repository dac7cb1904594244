"""Terminal timing knobs: defaults as documented, every value range-checked."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import SandbridgeError
from sandbridge.terminals.settings import TerminalSettings


def test_defaults_are_the_documented_ones() -> None:
    settings = TerminalSettings.from_env({})
    assert (settings.lease, settings.refresh, settings.ready_budget, settings.idle) == (
        10.0, 5.0, 5.0, 300.0,
    )  # fmt: skip
    assert settings.relay_tap is None


@pytest.mark.parametrize(
    "env",
    [
        {"SANDBRIDGE_TERMINAL_LEASE": "11"},
        {"SANDBRIDGE_TERMINAL_LEASE": "abc"},
        {"SANDBRIDGE_TERMINAL_IDLE": "0"},
        {"SANDBRIDGE_TERMINAL_REFRESH": "nan"},
        {"SANDBRIDGE_TERMINAL_LEASE": "2", "SANDBRIDGE_TERMINAL_REFRESH": "2"},
    ],
)
def test_knobs_out_of_range_are_refused_with_their_value(env: dict[str, str]) -> None:
    with pytest.raises(SandbridgeError) as refused:
        TerminalSettings.from_env(env)
    assert any(value in str(refused.value) for value in env.values())


def test_knobs_shorten_the_timings() -> None:
    settings = TerminalSettings.from_env(
        {"SANDBRIDGE_TERMINAL_LEASE": "2", "SANDBRIDGE_TERMINAL_REFRESH": "0.5"}
    )
    assert (settings.lease, settings.refresh) == (2.0, 0.5)
