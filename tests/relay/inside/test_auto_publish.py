"""Auto-publish on a poll loop (``relay/inside/auto_publish.py``), in this process against a
relay.sock played by the test, with real listening sockets (rules naming only the
test's own ports): a port that starts listening is registered with ``auto`` and its
process's name, and unregistered once it is gone; a relay that never answers, answers
garbage or closes is said on stderr as before and the scans go on; a full session is
said once; a closed publisher leaves nothing behind. The scan itself is
test_listening_ports.py's, the decisions test_port_tracker.py's, the whole in a real
sandbox tests/session/test_auto_publish.py's."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbridge.aio.poll_loop import PollLoop
from sandbridge.protocol.publish_rules import PublishAction, PublishRule
from sandbridge.protocol.sandbox_requests import (
    UNKNOWN_PROCESS,
    encode_auto_register_request,
    encode_unregister_request,
    process_name,
)
from sandbridge.relay.inside import relay_call
from sandbridge.relay.inside.auto_publish import OWNER_LOOKUPS, POLL_INTERVAL, AutoPublisher
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
HOST_PORT = 43125
THIS_PROCESS = process_name(Path("/proc/self/comm").read_text())


@pytest.fixture
def apps() -> Iterator[list[socket.socket]]:
    """Two loopback ports bound, not listening until the test says so."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(2)]
    for sock in socks:
        sock.bind(("127.0.0.1", 0))
    yield socks
    for sock in socks:
        sock.close()


def port(sock: socket.socket) -> int:
    number: int = sock.getsockname()[1]
    return number


def registering(conn: socket.socket, line: bytes) -> None:
    """The host's answers: each registration gets HOST_PORT, each unregister its ok."""
    if b'"unregister"' in line:
        conn.sendall(b'{"ok":true,"host_port":%d}\n' % HOST_PORT)
    else:
        conn.sendall(b'{"ok":true,"host_port":%d,"base_path":"/","url":"u"}\n' % HOST_PORT)


def _publishing(relay: PlayedRelay, apps: list[socket.socket]) -> tuple[PollLoop, AutoPublisher]:
    loop = PollLoop()
    rules = [PublishRule(port(s), port(s), PublishAction.NOTIFY, "test") for s in apps]
    publisher = AutoPublisher(loop, rules, str(relay.path))
    publisher.start()
    return loop, publisher


def test_a_port_that_listens_is_registered_and_unregistered_once_gone(
    relay_with: Callable[[Behaviour], PlayedRelay], apps: list[socket.socket]
) -> None:
    relay = relay_with(registering)
    loop, publisher = _publishing(relay, apps)
    listening = port(apps[0])
    apps[0].listen(1)
    run_until(loop, lambda: len(relay.requests) == 1)
    apps[0].close()
    run_until(loop, lambda: len(relay.requests) == 2)
    publisher.close()
    assert relay.requests == [
        encode_auto_register_request(listening, THIS_PROCESS),
        encode_unregister_request(HOST_PORT),
    ]


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        (silent, "'timed out'"),
        (answering(b"garbage\n"), "'message is not valid JSON"),
        (closing, "'message is not valid JSON"),
    ],
    ids=["never-answers", "garbage", "closes"],
)
def test_a_hostile_relay_is_said_on_stderr_and_the_scans_go_on(
    relay_with: Callable[[Behaviour], PlayedRelay],
    apps: list[socket.socket],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    behaviour: Behaviour,
    reason: str,
) -> None:
    monkeypatch.setattr(relay_call, "ANSWER_TIMEOUT", 0.5)
    relay = relay_with(behaviour)
    loop, publisher = _publishing(relay, apps)
    apps[0].listen(1)
    said = Said(capsys)
    run_until(loop, said.anything)
    errors = said.lines
    apps[1].listen(1)  # a later scan offers the next port: nothing waits on the first
    run_until(loop, lambda: len(relay.requests) == 2)
    publisher.close()
    assert len(errors) == 1
    assert errors[0].startswith(
        f"auto_publish.failed port={port(apps[0])} process={THIS_PROCESS!r} "
        f"address='127.0.0.1' reason={reason}"
    )
    assert relay.requests[1] == encode_auto_register_request(port(apps[1]), THIS_PROCESS)


def test_a_full_session_is_said_and_no_other_port_is_offered(
    relay_with: Callable[[Behaviour], PlayedRelay],
    apps: list[socket.socket],
    capsys: pytest.CaptureFixture[str],
) -> None:
    full = b'{"ok":false,"error":"this session already has 1 apps; the limit is 1"}\n'
    relay = relay_with(answering(full))
    loop, publisher = _publishing(relay, apps)
    apps[0].listen(1)
    said = Said(capsys)
    run_until(loop, said.anything)
    errors = said.lines
    apps[1].listen(1)
    loop.call_later(1.0, loop.stop)  # two scans later
    loop.run()
    publisher.close()
    assert len(errors) == 1
    assert errors[0].startswith(f"auto_publish.session_full port={port(apps[0])} ")
    assert (
        "the limit is 1; ports that listen from now on are published once an app goes"
        in (errors[0])
    )
    assert len(relay.requests) == 1


def test_a_closed_publisher_leaves_nothing_on_the_loop(
    relay_with: Callable[[Behaviour], PlayedRelay], apps: list[socket.socket]
) -> None:
    relay = relay_with(silent)
    loop, publisher = _publishing(relay, apps)
    apps[0].listen(1)
    run_until(loop, relay.received.is_set)  # a registration in flight
    publisher.close()
    assert loop._readers == {} and loop._writers == {}
    assert loop._timeout_ms() is None


def _publishing_listening(
    relay: PlayedRelay, app: socket.socket, proc: Path
) -> tuple[PollLoop, AutoPublisher]:
    """A publisher reading owners from ``proc`` whose first scan (at its start) finds
    ``app`` listening."""
    app.listen(1)
    loop = PollLoop()
    rules = [PublishRule(port(app), port(app), PublishAction.NOTIFY, "test")]
    publisher = AutoPublisher(loop, rules, str(relay.path), proc=proc)
    publisher.start()
    return loop, publisher


def _holds(proc: Path, pid: int, comm: str, app: socket.socket) -> None:
    """``proc`` shows process ``pid``, named ``comm``, holding ``app``'s socket."""
    (proc / str(pid) / "fd").mkdir(parents=True)
    (proc / str(pid) / "comm").write_text(f"{comm}\n")
    os.symlink(f"socket:[{os.fstat(app.fileno()).st_ino}]", proc / str(pid) / "fd" / "3")


def test_a_port_whose_owner_shows_late_is_published_under_its_name(
    relay_with: Callable[[Behaviour], PlayedRelay], apps: list[socket.socket], tmp_path: Path
) -> None:
    relay = relay_with(registering)
    proc = tmp_path / "proc"
    proc.mkdir()
    loop, publisher = _publishing_listening(relay, apps[0], proc)  # scanned: no owner yet
    loop.call_later(POLL_INTERVAL / 2, lambda: _holds(proc, 4242, "vite-node", apps[0]))
    run_until(loop, lambda: len(relay.requests) == 1)
    publisher.close()
    assert relay.requests == [encode_auto_register_request(port(apps[0]), "vite-node")]


def test_a_port_whose_owner_never_shows_is_published_as_unknown_after_the_lookups(
    relay_with: Callable[[Behaviour], PlayedRelay], apps: list[socket.socket], tmp_path: Path
) -> None:
    relay = relay_with(registering)
    started = time.monotonic()
    loop, publisher = _publishing_listening(relay, apps[0], tmp_path)  # no process at all
    run_until(loop, lambda: len(relay.requests) == 1)
    publisher.close()
    assert relay.requests == [encode_auto_register_request(port(apps[0]), UNKNOWN_PROCESS)]
    assert time.monotonic() - started >= OWNER_LOOKUPS * POLL_INTERVAL  # each scan asked
