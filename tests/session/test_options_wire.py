"""A session's options cross to the daemon as data and come back the same, or refused."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from sandbridge.clipboard.mode import ClipboardMode, ClipboardSettings
from sandbridge.containers.settings import ContainerSettings
from sandbridge.exceptions import DaemonError
from sandbridge.project.policy import load_policy
from sandbridge.protocol.http.origin_policy import UrlForm
from sandbridge.protocol.open_request import ExternalOpens, OpenAction
from sandbridge.protocol.publish_rules import parse_rule
from sandbridge.protocol.relay_settings import LIMITS, Limit
from sandbridge.relay.host.open_settings import OpenSettings
from sandbridge.relay.host.settings import ForwardingMode, RelaySettings
from sandbridge.session.options import SessionOptions
from sandbridge.session.options_wire import decode, encode
from sandbridge.ssh_agent.choice import AgentSettings, parse_choice


def options(tmp_path: Path) -> SessionOptions:
    (tmp_path / ".sandbridge").mkdir()
    (tmp_path / ".sandbridge" / "allow").write_text("example.org\n*.pypi.example:8443\ngate:5432\n")
    policy = load_policy(tmp_path, resolver="9.9.9.9", publish=["3000-3999 silent"])
    return SessionOptions(
        workdir=tmp_path,
        protocol=ForwardingMode.STREAM,
        settings=RelaySettings(
            header_timeout=3.5,
            max_apps=7,
            private=True,
            url_form=UrlForm.IP,
            publish_rules=(parse_rule("auto", "--publish"),),
            pool_size=0,
            pool_idle_seconds=0.5,
        ),
        command=("npm", "run", "dev"),
        policy=policy,
        open_settings=OpenSettings(
            OpenAction.PRINT,
            ("firefox", "--new-tab"),
            ExternalOpens.ALLOW,
            oauth_callbacks=True,
            allowed_hosts=("auth.example.com", "*.corp.example"),
            callback_deadline=30.0,
        ),
        terminal_socket=True,
        writable=(tmp_path / "bound", tmp_path / "other"),
    )


def test_options_come_back_as_they_were_sent(tmp_path: Path) -> None:
    sent = options(tmp_path)
    received = decode(encode(sent))
    assert received.workdir == sent.workdir
    assert received.protocol is sent.protocol
    assert received.settings == sent.settings
    assert received.open_settings == sent.open_settings
    assert received.command == sent.command
    assert received.terminal_socket is True
    assert received.writable == sent.writable
    assert sent.policy is not None and received.policy is not None
    for name in ("mode", "gate_addr", "resolver", "rules", "host_services", "publish"):
        assert getattr(received.policy, name) == getattr(sent.policy, name), name


def test_a_long_command_is_sent_cut_short_for_display(tmp_path: Path) -> None:
    """A long ``sh -c`` script must not make the daemon request too large: the command
    crosses only as the dashboard shows it."""
    sent = dataclasses.replace(options(tmp_path), command=("sh", "-c", "y" * 100_000, *["a"] * 99))
    received = decode(encode(sent))
    assert received.command[:2] == ("sh", "-c")
    assert received.command[2] == "y" * 200
    assert len(received.command) == 32


def test_a_policy_line_keeps_its_source(tmp_path: Path) -> None:
    received = decode(encode(options(tmp_path))).policy
    assert received is not None
    sources = [rule.source for rule in received.rules]
    assert sources == [".sandbridge/allow:1", ".sandbridge/allow:2"]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"workdir": 3}, "workdir must be a str, got 3"),
        ({"protocol": "carrier-pigeon"}, "'carrier-pigeon' is not a valid ForwardingMode"),
        ({"settings": {"max_apps": 0}}, "max_apps must be an integer from 1 to 1024, got 0"),
        ({"settings": {"max_apps": True}}, "max_apps must be an integer from 1 to 1024, got True"),
        ({"settings": {"url_form": "fax"}}, "'fax' is not a valid UrlForm"),
        ({"settings": {"publish": [["99999", "x"]]}}, "x: publish = 99999: give auto"),
        ({"policy": [["protect", "/etc", "x"]]}, "x: 'protect' is not a setting the daemon"),
        ({"policy": [["allow", "exa mple.org", "y"]]}, "policy: y:"),
        ({"policy": "net = full"}, "policy must be a list of [key, value, source]"),
        ({"open": {"browser": []}}, "browser must be an argv, got []"),
        ({"open": {"oauth_callbacks": "on"}}, "oauth_callbacks must be a bool, got 'on'"),
        ({"open": {"allowed_hosts": "a.example"}}, "allowed_hosts must be a list"),
        ({"open": {"allowed_hosts": [7]}}, "allowed_hosts must be names, got [7]"),
        ({"open": {"callback_deadline": 0}}, "callback_deadline must be seconds, got 0"),
        ({"open": {"callback_deadline": True}}, "callback_deadline must be seconds, got True"),
        ({"settings": {"pool_size": -1}}, "pool_size must be an integer from 0 to 64, got -1"),
        (
            {"settings": {"pool_idle_seconds": 0}},
            "pool_idle_seconds must be more than 0 and at most 300 seconds, got 0",
        ),
        ({"settings": {"pool_size": 65}}, "pool_size must be an integer from 0 to 64, got 65"),
        ({"command": "rm -rf /"}, "command must be at most 32 strings"),
        ({"command": ["x" * 201]}, "command must be at most 32 strings"),
        ({"terminal_socket": "yes"}, "terminal_socket must be a bool, got 'yes'"),
        ({"writable": "/tmp"}, "writable must be at most 64 absolute paths"),
        ({"writable": ["relative/dir"]}, "got ['relative/dir']"),
        ({"writable": [""]}, "writable must be at most 64 absolute paths"),
        ({"writable": ["/" + "x" * 4096]}, "of at most 4096 characters"),
        ({"writable": ["/d"] * 65}, "writable must be at most 64 absolute paths"),
        ({"writable": [7]}, "writable must be at most 64 absolute paths"),
    ],
)
def test_a_malformed_field_is_refused_by_name(
    tmp_path: Path, change: dict[str, Any], error: str
) -> None:
    data = encode(options(tmp_path))
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(data[key], dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    with pytest.raises(DaemonError) as caught:
        decode(data)
    assert error in str(caught.value)


def test_an_older_clients_request_has_no_terminal_socket(tmp_path: Path) -> None:
    data = encode(options(tmp_path))
    del data["terminal_socket"]
    assert decode(data).terminal_socket is False


def test_an_older_clients_request_names_no_writable_places(tmp_path: Path) -> None:
    data = encode(options(tmp_path))
    del data["writable"]
    assert decode(data).writable == ()


def _with_limit(data: dict[str, Any], key: str, value: object) -> dict[str, Any]:
    return {**data, "settings": {**data["settings"], key: value}}


@pytest.mark.parametrize("limit", LIMITS, ids=lambda limit: limit.name)
def test_a_limit_past_either_bound_is_refused_naming_its_key_and_bounds(
    tmp_path: Path, limit: Limit[float] | Limit[int]
) -> None:
    below = limit.minimum if limit.exclusive_minimum else limit.minimum - 1
    sent = encode(options(tmp_path))
    for value in (below, limit.maximum + 1, None, "8"):
        with pytest.raises(DaemonError) as caught:
            decode(_with_limit(sent, limit.wire, value))
        assert str(caught.value) == (
            f"session options: {limit.wire} must be {limit.bounds}, got {value!r}"
        )


@pytest.mark.parametrize("limit", LIMITS, ids=lambda limit: limit.name)
def test_a_limit_at_its_bounds_comes_back_as_it_was_sent_through_json(
    tmp_path: Path, limit: Limit[float] | Limit[int]
) -> None:
    low = limit.minimum + 0.25 if limit.exclusive_minimum else limit.minimum
    base = options(tmp_path)
    for value in (low, limit.default, limit.maximum):
        changes: dict[str, Any] = {limit.name: limit.kind(value)}
        sent = dataclasses.replace(base, settings=RelaySettings(**changes))
        received = decode(json.loads(json.dumps(encode(sent))))
        assert received.settings == sent.settings
        assert getattr(received.settings, limit.name) == value


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_timeout_that_json_makes_no_finite_number_is_refused(tmp_path: Path, number: str) -> None:
    """Python's JSON reads NaN and Infinity (and 1e999 as infinity): none is a timeout."""
    text = json.dumps(_with_limit(encode(options(tmp_path)), "response_timeout", 1.0))
    data = json.loads(text.replace('"response_timeout": 1.0', f'"response_timeout": {number}'))
    with pytest.raises(DaemonError, match=r"^session options: response_timeout must be more "):
        decode(data)


def test_a_session_with_the_ssh_agent_bridge_is_never_sent_to_the_daemon(tmp_path: Path) -> None:
    with_agent = dataclasses.replace(
        options(tmp_path), ssh_agent=AgentSettings(parse_choice(["deploy"]), "/owner.sock")
    )
    with pytest.raises(DaemonError, match="served by its own process, not the daemon"):
        encode(with_agent)


def test_an_older_clients_request_has_no_oauth_callbacks(tmp_path: Path) -> None:
    data = encode(options(tmp_path))
    for key in ("oauth_callbacks", "allowed_hosts", "callback_deadline"):
        del data["open"][key]
    opens = decode(data).open_settings
    assert opens is not None and not opens.oauth_callbacks and opens.allowed_hosts == ()


def test_a_session_with_the_clipboard_bridge_is_never_sent_to_the_daemon(tmp_path: Path) -> None:
    with_clipboard = dataclasses.replace(
        options(tmp_path), clipboard=ClipboardSettings(ClipboardMode.READ)
    )
    with pytest.raises(DaemonError, match="--clipboard is served by its own process"):
        encode(with_clipboard)


def test_a_session_with_the_container_bridge_is_never_sent_to_the_daemon(tmp_path: Path) -> None:
    with_containers = dataclasses.replace(
        options(tmp_path), containers=ContainerSettings(tmp_path / "e.sock", frozenset({"a"}))
    )
    with pytest.raises(DaemonError, match="--containers is served by its own process"):
        encode(with_containers)
