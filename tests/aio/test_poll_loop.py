"""The poll loop: readers, writers and timers on real sockets, run until stopped, and
moved with what is pending onto a running event loop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from sandbridge.aio import event_loop
from sandbridge.aio.poll_loop import PollLoop


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    yield left, right
    left.close()
    right.close()


def test_a_reader_runs_when_its_socket_has_data(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    loop = PollLoop()
    got: list[bytes] = []

    def readable() -> None:
        got.append(left.recv(100))
        loop.stop()

    loop.add_reader(left.fileno(), readable)
    right.send(b"ping")
    loop.run()
    assert got == [b"ping"]


def test_a_reader_hears_the_peer_hang_up(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    loop = PollLoop()
    got: list[bytes] = []

    def readable() -> None:
        got.append(left.recv(100))
        loop.stop()

    loop.add_reader(left.fileno(), readable)
    right.shutdown(socket.SHUT_WR)
    loop.run()
    assert got == [b""]


def test_a_writer_runs_when_its_socket_has_room(pair: tuple[socket.socket, socket.socket]) -> None:
    left, _ = pair
    loop = PollLoop()
    ran: list[str] = []

    def writable() -> None:
        ran.append("writable")
        assert loop.remove_writer(left.fileno())
        loop.stop()

    loop.add_writer(left.fileno(), writable)
    loop.run()
    assert ran == ["writable"]
    assert not loop.remove_writer(left.fileno())


def test_timers_fire_in_the_order_they_are_due_and_a_cancelled_one_never() -> None:
    loop = PollLoop()
    fired: list[str] = []

    def second() -> None:
        fired.append("second")
        loop.stop()

    loop.call_later(0.02, second)
    loop.call_later(0.0, lambda: fired.append("first"))
    loop.call_later(0.01, lambda: fired.append("cancelled")).cancel()
    loop.run()
    assert fired == ["first", "second"]


def test_a_removed_reader_is_not_called(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    loop = PollLoop()
    loop.add_reader(left.fileno(), lambda: pytest.fail("removed reader called"))
    assert loop.remove_reader(left.fileno())
    right.send(b"x")
    # Ready in the same poll: had the first reader stayed, it would run beside this one.
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as other:
        other.bind("")  # an abstract address, to send to itself
        other.sendto(b"y", other.getsockname())
        loop.add_reader(other.fileno(), loop.stop)
        loop.run()


def test_a_failing_callback_is_reported_and_the_loop_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    loop = PollLoop()

    def fail() -> None:
        raise RuntimeError("broken handler")

    loop.call_later(0.0, fail)
    loop.call_later(0.01, loop.stop)
    loop.run()
    assert "broken handler" in capsys.readouterr().err


def test_move_to_hands_readers_and_pending_timers_to_the_event_loop(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """What a handler registered before the move keeps running on the event loop, and
    what it registers or cancels after the move goes to the event loop too."""
    left, right = pair
    loop = PollLoop()
    events: list[str] = []
    done: list[asyncio.Future[None]] = []

    def readable() -> None:
        events.append(left.recv(100).decode())
        loop.remove_reader(left.fileno())
        loop.call_later(0.0, lambda: done[0].set_result(None))

    loop.add_reader(left.fileno(), readable)
    timer_fired: list[asyncio.Future[None]] = []

    def on_timer() -> None:
        events.append("timer")
        timer_fired[0].set_result(None)

    loop.call_later(0.01, on_timer)
    never = loop.call_later(0.01, lambda: events.append("cancelled"))

    async def scenario() -> None:
        running = asyncio.get_running_loop()
        done.append(running.create_future())
        timer_fired.append(running.create_future())
        loop.move_to(running)
        never.cancel()  # cancelling after the move cancels the event loop's timer
        await timer_fired[0]
        right.send(b"data")
        await done[0]

    event_loop.run(scenario())
    assert events == ["timer", "data"]
