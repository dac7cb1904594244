"""One request on relay.sock without blocking (``relay/inside/relay_call.py``), on a poll loop
in this process against a relay played by the test on a real Unix socket: the answer,
and every failure ``ags-webview-url``'s blocking ``ask_relay`` meets, with its words
(a relay that never answers, answers garbage, closes, or is not there); a full queue is
tried again; a silent relay holds up nothing else on the loop; a closed call calls
nothing."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbridge.aio.poll_loop import PollLoop
from sandbridge.protocol.sandbox_requests import encode_register_request
from sandbridge.relay.inside import relay_call
from sandbridge.relay.inside.relay_call import Outcome, RelayCall
from sandbridge.relay.inside.url_helper import ask_relay

# What the played relay does with each request line: answer (or not) on the connection.
Behaviour = Callable[[socket.socket, bytes], None]
# A run that has not ended by then has failed (every wait here is far shorter).
RUN_LIMIT = 20.0
REQUEST = encode_register_request(4173, "/")


class PlayedRelay:
    """A relay.sock listener in a thread: each connection's request line is recorded and
    handed to ``behaviour``; a connection stays open until the relay stops."""

    def __init__(self, path: Path, behaviour: Behaviour) -> None:
        self.path = path
        self.behaviour = behaviour
        self.requests: list[bytes] = []
        self.received = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(16)
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # stopped
            self._open.append(conn)
            line = b""
            while b"\n" not in line and (chunk := conn.recv(4096)):
                line += chunk
            self.requests.append(line)
            self.received.set()
            self.behaviour(conn, line)

    def stop(self) -> None:
        self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(10)
        for conn in self._open:
            conn.close()


def answering(answer: bytes) -> Behaviour:
    return lambda conn, _line: conn.sendall(answer)


def closing(conn: socket.socket, _line: bytes) -> None:
    conn.shutdown(socket.SHUT_RDWR)


def silent(_conn: socket.socket, _line: bytes) -> None:
    pass


@pytest.fixture
def relay_with(tmp_path: Path) -> Iterator[Callable[[Behaviour], PlayedRelay]]:
    relays: list[PlayedRelay] = []

    def make(behaviour: Behaviour) -> PlayedRelay:
        relay = PlayedRelay(tmp_path / f"relay-{len(relays)}.sock", behaviour)
        relays.append(relay)
        return relay

    yield make
    for relay in relays:
        relay.stop()


def run_until(loop: PollLoop, done: Callable[[], bool], limit: float = RUN_LIMIT) -> None:
    """Run ``loop`` until ``done()`` holds (checked after every callback's turn, by a
    timer of the loop); fail if it does not within ``limit`` seconds."""
    deadline = time.monotonic() + limit

    def check() -> None:
        if done() or time.monotonic() > deadline:
            loop.stop()
        else:
            loop.call_later(0.01, check)

    loop.call_later(0, check)
    loop.run()
    assert done(), f"not done within {limit} s"


class Said:
    """The lines written to stderr (``capsys``) so far, gathered while a loop runs."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys
        self.lines: list[str] = []

    def anything(self) -> bool:
        self.lines += self._capsys.readouterr().err.splitlines()
        return bool(self.lines)


def outcome_of(path: str, request: bytes = REQUEST) -> Outcome:
    loop = PollLoop()
    outcomes: list[Outcome] = []
    RelayCall(loop, path, request, outcomes.append)
    run_until(loop, lambda: bool(outcomes))
    assert len(outcomes) == 1
    return outcomes[0]


def blocking_failure(path: str) -> str:
    """What ``ask_relay`` (``ags-webview-url``'s blocking request) says for ``path``."""
    with pytest.raises((OSError, ValueError)) as caught:
        ask_relay(REQUEST, path)
    return str(caught.value)


def test_the_answer_is_decoded_and_the_request_sent_as_given(
    relay_with: Callable[[Behaviour], PlayedRelay],
) -> None:
    relay = relay_with(answering(b'{"ok":true,"host_port":43125}\n'))
    assert outcome_of(str(relay.path)) == {"ok": True, "host_port": 43125}
    assert relay.requests == [REQUEST]


@pytest.mark.parametrize(
    "behaviour",
    [answering(b"garbage\n"), answering(b"[1,2]\n"), answering(b"{" * 5000), closing],
    ids=["garbage", "not-an-object", "too-long", "closes"],
)
def test_a_hostile_answer_fails_with_the_blocking_clients_words(
    relay_with: Callable[[Behaviour], PlayedRelay], behaviour: Behaviour
) -> None:
    path = str(relay_with(behaviour).path)
    outcome = outcome_of(path)
    assert isinstance(outcome, ValueError)
    assert str(outcome) == blocking_failure(path)


def test_a_missing_relay_socket_fails_with_the_blocking_clients_words(tmp_path: Path) -> None:
    path = str(tmp_path / "nobody.sock")
    outcome = outcome_of(path)
    assert isinstance(outcome, FileNotFoundError)
    assert str(outcome) == blocking_failure(path)


def test_a_relay_that_never_answers_times_out_and_holds_up_nothing(
    relay_with: Callable[[Behaviour], PlayedRelay], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(relay_call, "ANSWER_TIMEOUT", 1.0)
    silent_relay = relay_with(silent)
    good_relay = relay_with(answering(b'{"ok":true}\n'))
    loop = PollLoop()
    finished: list[tuple[str, Outcome]] = []
    RelayCall(loop, str(silent_relay.path), REQUEST, lambda o: finished.append(("silent", o)))
    RelayCall(loop, str(good_relay.path), REQUEST, lambda o: finished.append(("good", o)))
    run_until(loop, lambda: len(finished) == 2)
    assert finished[0] == ("good", {"ok": True})
    name, outcome = finished[1]
    assert name == "silent"
    assert isinstance(outcome, TimeoutError)
    assert str(outcome) == "timed out"  # what a blocking socket's timeout says


def test_a_full_relay_queue_is_tried_again_until_it_accepts(tmp_path: Path) -> None:
    path = str(tmp_path / "full.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)
    queued = []
    while True:  # fill the queue until a connect would wait
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
        try:
            sock.connect(path)
        except BlockingIOError:
            sock.close()
            break
        queued.append(sock)
    loop = PollLoop()
    outcomes: list[Outcome] = []
    RelayCall(loop, path, REQUEST, outcomes.append)

    def make_room() -> None:  # the relay catches up: it takes the queued connections
        listener.setblocking(False)
        for _ in queued:
            listener.accept()[0].close()
        loop.add_reader(listener.fileno(), answer)

    def answer() -> None:
        conn, _ = listener.accept()
        conn.sendall(b'{"ok":true}\n')
        conn.close()

    loop.call_later(3 * relay_call.CONNECT_RETRY_DELAY, make_room)
    try:
        run_until(loop, lambda: bool(outcomes))
    finally:
        for sock in queued:
            sock.close()
        listener.close()
    assert outcomes == [{"ok": True}]


def test_a_closed_call_calls_nothing_and_leaves_nothing_on_the_loop(
    relay_with: Callable[[Behaviour], PlayedRelay],
) -> None:
    relay = relay_with(silent)
    loop = PollLoop()
    outcomes: list[Outcome] = []
    call = RelayCall(loop, str(relay.path), REQUEST, outcomes.append)
    run_until(loop, relay.received.is_set)
    call.close()
    assert loop._readers == {} and loop._writers == {}
    loop.call_later(0.2, loop.stop)  # past any callback the call could have left
    loop.run()
    assert outcomes == []
