"""Inspection output never carries an environment value or a URL credential."""

from __future__ import annotations

import json

import pytest

from sandbridge.runner.network_cli import HIDDEN, mask_argv
from sandbridge.sandbox.publish import parse_publish


def test_bwrap_setenv_values_are_hidden_names_kept() -> None:
    argv = ["bwrap", "--setenv", "TOKEN", "abc", "--setenv", "PATH", "/bin", "--", "true"]
    assert mask_argv(argv) == [
        "bwrap",
        "--setenv",
        "TOKEN",
        HIDDEN,
        "--setenv",
        "PATH",
        HIDDEN,
        "--",
        "true",
    ]


def test_unshare_config_env_values_are_hidden() -> None:
    config = json.dumps({"env": {"TOKEN": "abc"}, "argv": ["curl", "http://u:p@x.org/"]})
    masked = json.loads(mask_argv(["python", config])[1])
    assert masked["env"] == {"TOKEN": HIDDEN}
    assert masked["argv"] == ["curl", "http://***@x.org/"]


def test_url_credentials_in_the_command_are_hidden() -> None:
    assert mask_argv(["git", "clone", "https://tok@git.example/r"]) == [
        "git",
        "clone",
        "https://***@git.example/r",
    ]


@pytest.mark.parametrize(
    ("value", "expected"), [("8000", (8000, "/")), ("8000:/app", (8000, "/app"))]
)
def test_publish_values(value: str, expected: tuple[int, str]) -> None:
    assert parse_publish(value) == expected


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("0", "port must be 1..65535"), ("x", "port must be"), ("80:app", "must start with '/'")],
)
def test_bad_publish_values_name_the_value(value: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment) as caught:
        parse_publish(value)
    assert repr(value) in str(caught.value)
