"""``connect``'s destination and SSH options: which transport they choose."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.cli.ssh_options import add_ssh_options, ssh_link_opener, ssh_transport
from tests.remote.sshd import Sshd, sshd_in


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--via")
    parser.add_argument("--name", default=None)
    add_ssh_options(parser)
    return parser.parse_args(argv)


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    yield from sshd_in(tmp_path / "far")


def test_no_destination_leaves_the_choice_to_via() -> None:
    assert ssh_link_opener(parse("--via", "cat")) is None


def test_destination_and_via_together_are_refused() -> None:
    with pytest.raises(SystemExit, match="either a destination \\('box'\\) or --via"):
        ssh_link_opener(parse("box", "--via", "cat"))


def test_malformed_destination_is_refused_by_name() -> None:
    with pytest.raises(SystemExit, match="not a host name in 'alice@-oProxyCommand=x'"):
        ssh_link_opener(parse("alice@-oProxyCommand=x"))


def test_remote_command_defaults_to_serve_stdio() -> None:
    assert parse("box").remote_command == "sandbridge serve-stdio"


def test_destination_opens_an_ssh_link_with_the_given_config(sshd: Sshd) -> None:
    sshd.trust_host_key()
    sshd.write_client_config()
    args = parse("far", "-F", str(sshd.config_path), "--remote-command", "printf R; exec cat")
    open_link = ssh_link_opener(args)
    assert open_link is not None

    async def scenario() -> None:
        link = await open_link()
        assert link.description == "ssh far"
        assert await link.reader.read(1) == b"R"
        await link.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))


@pytest.mark.parametrize(
    ("argv", "described", "name"),
    [
        (("alice@box",), "ssh alice@box", "box"),
        (("alice@Box.Example:2222",), "ssh alice@Box.Example:2222", "box.example"),
        (("[::1]",), "ssh [::1]", "remote"),  # not a machine name: the default
        (("box", "--name", "build"), "ssh box", "build"),
    ],
)
def test_ssh_transport_describes_and_names_the_machine(
    argv: tuple[str, ...], described: str, name: str
) -> None:
    found = ssh_transport(parse(*argv))
    assert found is not None
    assert found[1:] == (described, name)


def test_ssh_transport_without_a_destination_is_none() -> None:
    assert ssh_transport(parse("--via", "cat")) is None
