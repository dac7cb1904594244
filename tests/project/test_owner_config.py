"""The owner's own config file: strictly read, each value with its line; its keys are
refused in a project's config."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbridge.exceptions import PolicyError
from sandbridge.project.owner_config import (
    OwnerConfig,
    config_path,
    parse_owner_config,
    read_owner_config,
)
from sandbridge.project.policy import load_policy
from sandbridge.project.setting import Setting


def test_settings_carry_the_line_they_came_from() -> None:
    config = parse_owner_config(
        "# mine\n\noauth_callbacks = on\n"
        "open_external_allow = auth.example.com, *.corp.example  # logins\n"
        "open_external_allow = Login.Example.ORG.\n",
        "owner",
    )
    assert config.oauth_callbacks == Setting(True, "owner:3")
    assert config.open_external_allow == (
        Setting("auth.example.com", "owner:4"),
        Setting("*.corp.example", "owner:4"),
        Setting("login.example.org", "owner:5"),
    )
    assert config.allowed_hosts() == ("auth.example.com", "*.corp.example", "login.example.org")


def test_an_empty_file_sets_nothing() -> None:
    assert parse_owner_config("\n# nothing\n") == OwnerConfig()


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("oauth_callbacks = yes", "owner:1: oauth_callbacks must be on or off, got 'yes'"),
        ("oauth_callbacks = on\noauth_callbacks = off", "owner:2: oauth_callbacks is set again"),
        ("open_external_allow = *.com", "would allow a whole top-level domain"),
        ("open_external_allow = 127.0.0.1", "got '127.0.0.1'"),
        ("open_external_allow = https://auth.example.com/", "got 'https://auth.example.com/'"),
        ("open_external_allow = auth.example.com:443", "got 'auth.example.com:443'"),
        ("open_external_allow = a.example,,b.example", "got ''"),
        ("open_external_allow = *", "got '*'"),
        ("net = full", "owner:1: unknown key 'net'"),
        ("oauth_callbacks", "expected 'key = value', got 'oauth_callbacks'"),
    ],
)
def test_a_bad_line_is_refused_naming_its_place_and_value(text: str, named: str) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_owner_config(text, "owner")
    assert named in str(refused.value)


def test_the_file_is_under_xdg_config_home_else_home_config(tmp_path: Path) -> None:
    assert config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "sandbridge/config"
    assert config_path({"HOME": str(tmp_path)}) == tmp_path / ".config/sandbridge/config"


def test_the_file_is_read_with_its_path_as_the_source(tmp_path: Path) -> None:
    (tmp_path / "sandbridge").mkdir()
    path = tmp_path / "sandbridge" / "config"
    path.write_text("open_external_allow = auth.example.com\n")
    config = read_owner_config({"XDG_CONFIG_HOME": str(tmp_path)})
    assert config.open_external_allow == (Setting("auth.example.com", f"{path}:1"),)
    assert config.path == path


def test_no_file_is_an_empty_config(tmp_path: Path) -> None:
    assert read_owner_config({"XDG_CONFIG_HOME": str(tmp_path)}) == OwnerConfig()


def test_a_fifo_in_its_place_is_refused_without_blocking(tmp_path: Path) -> None:
    (tmp_path / "sandbridge").mkdir()
    os.mkfifo(tmp_path / "sandbridge" / "config")
    with pytest.raises(PolicyError, match="not a regular file"):
        read_owner_config({"XDG_CONFIG_HOME": str(tmp_path)})


@pytest.mark.parametrize("key", ["oauth_callbacks = on", "open_external_allow = evil.example"])
def test_a_project_config_naming_an_owner_key_is_refused(tmp_path: Path, key: str) -> None:
    (tmp_path / ".sandbridge").mkdir()
    (tmp_path / ".sandbridge" / "config").write_text(f"net = none\n{key}\n")
    with pytest.raises(PolicyError) as refused:
        load_policy(tmp_path)
    message = str(refused.value)
    assert message.startswith(".sandbridge/config:2: ")
    assert "belongs in the owner's own config (~/.config/sandbridge/config)" in message
