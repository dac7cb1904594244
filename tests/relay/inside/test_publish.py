"""``--publish PORT[:/base]`` on a poll loop (``relay/inside/publish.py``), in this process
against a relay.sock played by the test: the port is registered once its app listens,
with the contract's request; a refusal, a hostile or silent relay and the deadline are
said on stderr as before; a closed publisher leaves nothing behind."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import pytest

from sandbridge.aio.poll_loop import PollLoop
from sandbridge.protocol.sandbox_requests import encode_register_request
from sandbridge.relay.inside import publish, relay_call
from sandbridge.relay.inside.publish import PortPublisher
from tests.relay.inside.test_relay_call import (
    Behaviour,
    PlayedRelay,
    Said,
    answering,
    closing,
    relay_with,
    run_until,
    silent,
)

__all__ = ["relay_with"]  # the fixture, shared


@pytest.fixture
def app() -> Iterator[socket.socket]:
    """A loopback port bound but not listening yet: connections to it are refused
    until the test calls ``listen`` (the app has started)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    yield sock
    sock.close()


def _publishing(
    relay: PlayedRelay, app: socket.socket, base: str = "/"
) -> tuple[PollLoop, PortPublisher]:
    loop = PollLoop()
    publisher = PortPublisher(loop, app.getsockname()[1], base, str(relay.path))
    publisher.start()
    return loop, publisher


def test_the_port_is_registered_once_its_app_listens(
    relay_with: Callable[[Behaviour], PlayedRelay], app: socket.socket
) -> None:
    relay = relay_with(answering(b'{"ok":true,"host_port":43125}\n'))
    loop, publisher = _publishing(relay, app, "/app")
    loop.call_later(5 * publish.POLL_INTERVAL, lambda: app.listen(1))
    run_until(loop, relay.received.is_set)
    publisher.close()
    assert relay.requests == [encode_register_request(app.getsockname()[1], "/app")]


def test_an_app_on_ipv6_loopback_only_is_registered_once_it_listens(
    relay_with: Callable[[Behaviour], PlayedRelay],
) -> None:
    """Node's ``localhost`` is ``::1`` where /etc/hosts lists it first."""
    relay = relay_with(answering(b'{"ok":true,"host_port":43125}\n'))
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as app:
        app.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        app.bind(("::1", 0))
        loop, publisher = _publishing(relay, app)
        loop.call_later(5 * publish.POLL_INTERVAL, lambda: app.listen(1))
        run_until(loop, relay.received.is_set)
        publisher.close()
        assert relay.requests == [encode_register_request(app.getsockname()[1], "/")]


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        (
            answering(b'{"ok":false,"error":"no room"}\n'),
            "publish.refused port={} reason='no room'",
        ),
        (answering(b"garbage\n"), "publish.failed port={} reason='message is not valid JSON"),
        (closing, "publish.failed port={} reason="),
        (silent, "publish.failed port={} reason='timed out'"),
    ],
    ids=["refused", "garbage", "closes", "never-answers"],
)
def test_a_failed_registration_is_said_on_stderr(
    relay_with: Callable[[Behaviour], PlayedRelay],
    app: socket.socket,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    behaviour: Behaviour,
    expected: str,
) -> None:
    monkeypatch.setattr(relay_call, "ANSWER_TIMEOUT", 0.5)
    app.listen(1)
    loop, publisher = _publishing(relay_with(behaviour), app)
    said = Said(capsys)
    run_until(loop, said.anything)
    errors = said.lines
    publisher.close()
    assert len(errors) == 1
    assert errors[0].startswith(expected.format(app.getsockname()[1]))


def test_a_port_that_never_listens_is_given_up_at_the_deadline(
    relay_with: Callable[[Behaviour], PlayedRelay],
    app: socket.socket,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(publish, "PUBLISH_DEADLINE", 0.5)
    relay = relay_with(silent)
    loop, _ = _publishing(relay, app)
    said = Said(capsys)
    run_until(loop, said.anything)
    errors = said.lines
    port = app.getsockname()[1]
    assert errors == [f"publish.gave_up port={port} after_seconds=0.5"]
    assert loop._readers == {} and loop._writers == {} and loop._timeout_ms() is None
    assert relay.requests == []


def test_a_closed_publisher_leaves_nothing_on_the_loop(
    relay_with: Callable[[Behaviour], PlayedRelay], app: socket.socket
) -> None:
    relay = relay_with(silent)
    app.listen(1)
    loop, publisher = _publishing(relay, app)
    run_until(loop, relay.received.is_set)  # the registration is in flight
    publisher.close()
    assert loop._readers == {} and loop._writers == {}
    assert loop._timeout_ms() is None  # no timer left: the loop would sleep for good
