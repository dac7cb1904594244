"""Inspection output never carries an environment value or a URL credential."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbridge.cli.network import HIDDEN, mask_argv
from sandbridge.project.policy import NetMode
from sandbridge.relay.inside.publish import parse_publish
from sandbridge.sandbox.backend import sandbox_argv
from sandbridge.sandbox.network import SandboxNetwork
from sandbridge.sandbox.spec import SandboxSpec


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


VALUE = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=6)


@settings(max_examples=50, deadline=None)
@given(
    st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,10}", fullmatch=True), VALUE, max_size=4),
    st.sampled_from(["bwrap", "unshare"]),
)
def test_dry_run_argv_never_shows_an_environment_value(env: dict[str, str], backend: str) -> None:
    secrets = {name: f"secret-{value}" for name, value in env.items()}
    spec = SandboxSpec(
        command=["true"],
        workdir=Path("/tmp/work"),
        runtime_dir=Path("/tmp/ags-webview-relay-1"),
        home=Path("/tmp/home"),
        env=secrets,
        network=SandboxNetwork(mode=NetMode.ALLOW, gate_ports=(18081,)),
    )
    shown = " ".join(mask_argv(sandbox_argv(backend, spec)))
    for value in secrets.values():
        assert value not in shown
    for name in secrets:
        assert name in shown


def test_publish_flags_split_into_one_port_and_auto_publish_rules(tmp_path: Path) -> None:
    from sandbridge.cli import network as network_cli
    from sandbridge.cli.parser import build_parser

    args = build_parser().parse_args(
        ["run", "--publish", "8000:/app", "--publish", "auto", "--publish", "3000-3999", "--", "x"]
    )
    effective = network_cli.policy(args, tmp_path)
    network = network_cli.sandbox_network(args, effective)
    assert network.publish == ("8000:/app",)
    assert network.publish_rules == ("1-65535:notify", "3000-3999:notify")
    assert network.entry_options()[-4:] == [
        "--publish-rule",
        "1-65535:notify",
        "--publish-rule",
        "3000-3999:notify",
    ]


def test_only_ignore_rules_start_no_auto_publish(tmp_path: Path) -> None:
    from sandbridge.cli import network as network_cli
    from sandbridge.cli.parser import build_parser

    (tmp_path / ".sandbridge").mkdir()
    (tmp_path / ".sandbridge" / "config").write_text("publish = 5432 ignore\n")
    args = build_parser().parse_args(["run", "--", "x"])
    network = network_cli.sandbox_network(args, network_cli.policy(args, tmp_path))
    assert network.publish_rules == ()


def test_the_session_start_warns_of_an_entry_never_reached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sandbridge.cli.network import announce
    from sandbridge.project.policy import load_policy

    (tmp_path / ".sandbridge").mkdir()
    (tmp_path / ".sandbridge" / "allow").write_text("pkgs.test\npkgs.test private\n")
    announce(load_policy(tmp_path))
    assert (
        "sandbridge: warning: .sandbridge/allow:2: 'pkgs.test private' is never reached"
    ) in capsys.readouterr().err
