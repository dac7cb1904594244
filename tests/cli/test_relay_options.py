"""The relay's limits as flags (``cli/relay_options.py``): each made from its declaration
(protocol/relay_settings.py), its help saying its default and bounds, and a value out of
bounds refused in one line naming the flag, the bounds and the value."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from sandbridge.cli.parser import build_parser
from sandbridge.cli.relay_options import add_relay_options, relay_settings_of
from sandbridge.exceptions import SandbridgeError
from sandbridge.protocol.relay_settings import LIMITS, Limit
from tests.support.command_in_process import sandbridge

AnyLimit = Limit[float] | Limit[int]
BY_NAME = pytest.mark.parametrize("limit", LIMITS, ids=lambda limit: limit.name)
COMMANDS = pytest.mark.parametrize(
    "command", [["run"], ["host", "--runtime-dir", "rt"], ["demo"]], ids=lambda c: c[0]
)


def _past_each_bound(limit: AnyLimit) -> list[str]:
    below = limit.minimum if limit.exclusive_minimum else limit.minimum - 1
    above = limit.maximum + (1 if limit.kind is int else 0.5)
    return [limit.text(below), limit.text(above)]


@BY_NAME
@COMMANDS
def test_a_flag_past_either_bound_is_refused_naming_the_flag_and_bounds(
    limit: AnyLimit, command: list[str]
) -> None:
    for text in _past_each_bound(limit):
        args = build_parser().parse_args([*command, limit.flag, text])
        with pytest.raises(SandbridgeError) as caught:
            relay_settings_of(args)
        got = limit.kind(text)
        assert str(caught.value) == f"{limit.flag} must be {limit.bounds}, got {got!r}"


@BY_NAME
def test_a_flag_at_its_bounds_is_taken(limit: AnyLimit) -> None:
    low = limit.minimum + 0.5 if limit.exclusive_minimum else limit.minimum
    for value in (low, limit.maximum):
        args = build_parser().parse_args(["run", limit.flag, limit.text(value)])
        assert getattr(relay_settings_of(args), limit.name) == value


@pytest.mark.parametrize("text", ["nan", "inf", "-inf"])
def test_a_timeout_of_no_number_is_refused(text: str) -> None:
    args = build_parser().parse_args(["run", f"--response-timeout={text}"])
    with pytest.raises(SandbridgeError, match=r"^--response-timeout must be more than 0 and "):
        relay_settings_of(args)


@BY_NAME
def test_each_flags_help_says_its_default_and_bounds(limit: AnyLimit) -> None:
    run = argparse.ArgumentParser()
    add_relay_options(run)
    [action] = [a for a in run._actions if limit.flag in a.option_strings]
    assert action.help == (f"{limit.doc} (default {limit.text(limit.default)}; {limit.bounds})")
    assert action.type is limit.kind and action.dest == limit.dest


def test_a_pool_size_past_the_front_doors_is_refused_before_anything_is_prepared(
    tmp_path: Path,
) -> None:
    """The C front door cut a pool size over 64 down to 64 without a word; now ``run``
    refuses it in one line, before it remembers the project or writes anything."""
    home = tmp_path / "home"
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_RUNTIME_DIR": str(tmp_path / "xdg"),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
    }
    home.mkdir()
    (tmp_path / "xdg").mkdir(mode=0o700)
    workdir = tmp_path / "work"
    workdir.mkdir()
    argv = ["run", "--no-daemon", "--workdir", str(workdir), "--app-pool-size", "65"]
    result = sandbridge(*argv, "--", "true", env=env)  # in this process: refused
    assert result.returncode != 0
    assert result.stderr == (
        "sandbridge: --app-pool-size must be an integer from 0 to 64, got 65\n"
    )
    assert list(home.iterdir()) == [] and list(workdir.iterdir()) == []
