"""The OAuth callback bridge's options: off unless the owner turns it on (a flag, or the
owner's own config), listed by --print-policy with where each setting came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbridge.cli.parser import build_parser
from sandbridge.cli.relay_options import describe_bridges, open_settings
from sandbridge.exceptions import SandbridgeError


@pytest.fixture
def owner_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "sandbridge").mkdir()
    return tmp_path / "sandbridge" / "config"


def test_the_bridge_is_off_by_default_and_said_so(owner_config: Path) -> None:
    args = build_parser().parse_args(["run", "--", "x"])
    assert not open_settings(args).oauth_callbacks
    assert describe_bridges(args)[0].split() == ["oauth_callbacks", "=", "off", "(default)"]


def test_the_owners_config_turns_it_on_and_allows_hosts_each_with_its_line(
    owner_config: Path,
) -> None:
    owner_config.write_text("oauth_callbacks = on\nopen_external_allow = auth.example.com\n")
    args = build_parser().parse_args(["run", "--", "x"])
    settings = open_settings(args)
    assert settings.oauth_callbacks
    assert settings.allowed_hosts == ("auth.example.com",)
    lines = describe_bridges(args)
    assert lines[0].split() == ["oauth_callbacks", "=", "on", f"({owner_config}:1)"]
    assert lines[-1].split() == [
        "open_external_allow",
        "=",
        "auth.example.com",
        f"({owner_config}:2)",
    ]


def test_the_flag_turns_it_on_over_the_owners_off(owner_config: Path) -> None:
    owner_config.write_text("oauth_callbacks = off\n")
    args = build_parser().parse_args(
        ["run", "--oauth-callbacks", "--oauth-callback-deadline", "30", "--", "x"]
    )
    settings = open_settings(args)
    assert settings.oauth_callbacks and settings.callback_deadline == 30
    assert describe_bridges(args)[0].split() == [
        "oauth_callbacks",
        "=",
        "on",
        "(--oauth-callbacks)",
    ]


def test_a_bad_owners_config_or_deadline_stops_the_run_naming_it(owner_config: Path) -> None:
    owner_config.write_text("oauth_callbacks = yes\n")
    args = build_parser().parse_args(["run", "--", "x"])
    with pytest.raises(SandbridgeError, match=r"config:1: oauth_callbacks must be on or off"):
        open_settings(args)
    owner_config.write_text("")
    args = build_parser().parse_args(["run", "--oauth-callback-deadline", "0", "--", "x"])
    with pytest.raises(SandbridgeError, match="--oauth-callback-deadline must be positive, got 0"):
        open_settings(args)
