"""The relay's command-line options (cli/relay_options.py): what each refuses."""

from __future__ import annotations

import argparse

import pytest

from sandbridge.cli.relay_options import add_relay_options, relay_settings_of
from sandbridge.exceptions import SandbridgeError
from sandbridge.relay.settings import RelaySettings


def _settings(*argv: str) -> RelaySettings:
    parser = argparse.ArgumentParser()
    add_relay_options(parser)
    return relay_settings_of(parser.parse_args(argv))


@pytest.mark.parametrize("size", ["-1", "65"])
def test_an_app_pool_size_past_the_front_doors_limit_is_refused_naming_it(size: str) -> None:
    with pytest.raises(SandbridgeError, match=f"^--app-pool-size must be 0 to 64, got {size}$"):
        _settings("--app-pool-size", size)


@pytest.mark.parametrize("size", [0, 64])
def test_an_app_pool_size_within_the_limit_is_taken_as_given(size: int) -> None:
    settings = _settings("--app-pool-size", str(size))
    assert settings.pool_size == size
