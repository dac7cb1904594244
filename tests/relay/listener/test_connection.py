"""A browser connection's owner (:mod:`sandbridge.relay.listener.connection`): the path each kind of
connection takes through the stage table, read from its ``connection.stage`` events, and
its place in the limits given back when it closes.

An in-process app listener (plain TCP to a scripted app) and real browser sockets, as in
``test_arrivals.py``.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Callable

import pytest

from sandbridge import log
from sandbridge.aio import event_loop
from sandbridge.exceptions import IllegalMove
from sandbridge.relay.front import front
from sandbridge.relay.host.channel import Channel
from sandbridge.relay.host.settings import SessionScope
from sandbridge.relay.listener.app_listener import AppListener
from sandbridge.relay.listener.connection import Connection
from sandbridge.relay.listener.connection_stage import Event, Stage
from tests.relay.listener.test_arrivals import exchange, park_one, run
from tests.relay.listener.test_lane import (
    Script,
    ScriptedApp,
    _TcpConnector,
    answer_each,
    ok,
    scripted,
)

__all__ = ["scripted"]  # the fixture, used by name

_STAGE = re.compile(
    r"^connection\.stage port=(\d+) conn=(\d+)(?: event='([a-z_]+)')? stage='([a-z-]+)'$"
)


def paths(caplog: pytest.LogCaptureFixture) -> list[list[str]]:
    """Each connection's stages in the order it took them (its events between them)."""
    taken: dict[str, list[str]] = {}
    for message in caplog.messages:
        match = _STAGE.match(message)
        if match is not None:
            _, conn, event, stage = match.groups()
            taken.setdefault(conn, []).extend([event, stage] if event else [stage])
    return list(taken.values())


@pytest.fixture
def traced(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(log.TRACE, logger="sandbridge")
    return caplog


async def all_closed(listener: AppListener) -> None:
    """Until no connection counts any more (each was closed)."""
    for _ in range(1000):
        if not listener.connections and listener.scope.budget.session.held == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"still counted: {list(listener.connections.values())}")


def test_a_connection_that_sends_nothing_waits_then_closes(
    scripted: Callable[[Script], ScriptedApp], traced: pytest.LogCaptureFixture
) -> None:
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(), 10) == b""  # the keep-alive timeout
        writer.close()
        await all_closed(listener)

    run(app, body, keepalive_timeout=0.2)
    assert paths(traced) == [["waiting", "close", "closed"]]


def test_a_first_request_with_no_parked_app_connection_is_its_tasks(
    scripted: Callable[[Script], ScriptedApp], traced: pytest.LogCaptureFixture
) -> None:
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        await park_one(port, host)
        await all_closed(listener)

    run(app, body)
    assert paths(traced) == [["waiting", "start_task", "streaming", "close", "closed"]]


def test_a_first_request_on_a_parked_app_connection_goes_before_its_task_then_the_lane(
    scripted: Callable[[Script], ScriptedApp], traced: pytest.LogCaptureFixture
) -> None:
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        await park_one(port, host)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /early HTTP/1.1\r\n" + host + b"\r\n")
        await reader.readuntil(b"GET /early HTTP/1.1")
        writer.write(b"GET /kept HTTP/1.1\r\n" + host + b"\r\n")  # the lane relays it
        await reader.readuntil(b"GET /kept HTTP/1.1")
        writer.close()
        await all_closed(listener)

    run(app, body)
    assert paths(traced)[1] == [
        "waiting",
        "send_first",
        "in-flight",
        "start_task",
        "streaming",
        "enter_lane",
        "keep-alive",
        "leave_lane",  # the browser's end of stream: the task reads it
        "streaming",
        "close",
        "closed",
    ]


def test_an_upgraded_connection_is_a_tunnels_until_both_sides_close(
    scripted: Callable[[Script], ScriptedApp], traced: pytest.LogCaptureFixture
) -> None:
    def script(conn: socket.socket, app: ScriptedApp) -> None:
        app.read_request(conn)
        conn.sendall(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
        )
        conn.sendall(conn.recv(100))  # an echo of the first message

    app = scripted(script)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"GET /ws HTTP/1.1\r\n" + host + b"Connection: Upgrade\r\nUpgrade: websocket\r\n"
            b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        writer.close()
        await all_closed(listener)

    run(app, body)
    assert paths(traced) == [
        ["waiting", "start_task", "streaming", "upgrade", "tunnel", "close", "closed"]
    ]


def test_the_listener_closing_closes_its_connections_on_the_doorsteps(
    scripted: Callable[[Script], ScriptedApp], traced: pytest.LogCaptureFixture
) -> None:
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(1000):
            if listener.connections:
                break
            await asyncio.sleep(0.01)
        await listener.close()
        writer.close()
        assert listener.scope.budget.session.held == 0
        listener.scope.budget.check()

    run(app, body)
    assert paths(traced) == [["waiting", "close", "closed"]]


def test_a_refused_connection_never_becomes_one(
    scripted: Callable[[Script], ScriptedApp], traced: pytest.LogCaptureFixture
) -> None:
    """Past the limits a connection is answered 503 and never counts: it has no owner."""
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)  # the one place
        for _ in range(1000):
            if listener.connections:
                break
            await asyncio.sleep(0.01)
        answer = await exchange(port, b"GET / HTTP/1.1\r\n" + host + b"\r\n")
        assert answer.startswith(b"HTTP/1.1 503"), answer
        writer.close()

    run(app, body, max_connections_per_app=1)
    (path,) = paths(traced)  # the first one's alone
    assert path[0] == "waiting" and path[-1] == "closed"


def stage_of(connection: Connection) -> Stage:
    return connection.stage


def test_a_move_the_table_refuses_changes_nothing_and_a_second_close_is_none(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(1000):
            if listener.connections:
                break
            await asyncio.sleep(0.01)
        ((channel, connection),) = listener.connections.items()
        assert isinstance(channel, Channel) and isinstance(connection, Connection)
        with pytest.raises(IllegalMove, match="a waiting connection cannot upgrade"):
            connection.move(Event.UPGRADE)
        assert connection.stage is Stage.WAITING and listener.scope.budget.session.held == 1
        connection.close()
        connection.close()
        assert stage_of(connection) is Stage.CLOSED
        assert listener.scope.budget.session.held == 0 and not listener.connections
        listener.scope.budget.check()
        channel.abort()
        writer.close()

    run(app, body)


class _HostOnlyConnector(_TcpConnector):
    """App connections only the host holds (as the socket minter's are): the front door
    serves the listener and takes them into its pool."""

    def __init__(self, app_port: int) -> None:
        super().__init__(app_port)
        self.owned = object()  # type: ignore[assignment]  # (only its presence is asked)

    async def open(self, port: int) -> tuple[Channel, bytes] | None:
        opened = await super().open(port)
        assert opened is not None
        opened[0].host_only = True
        return opened


def test_the_front_doors_handoffs_leave_the_front_by_their_kinds_moves(
    scripted: Callable[[Script], ScriptedApp], traced: pytest.LogCaptureFixture
) -> None:
    """A first request the front does not know is handed over with its bytes (``FRESH``:
    its task serves it); the same request again, the front sends itself on an idle app
    connection, and an app slower than its grace hands it over sent (``SENT``: the lane
    takes the response)."""

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        while (request := app.read_request(conn)) is not None:
            if b"/slow" in request:
                app.go.wait(10)
            conn.sendall(ok(request.split(b"\r\n", 1)[0]))

    app = scripted(script)
    assert front.missing() is None

    async def main() -> None:
        listener = AppListener(app.port, "/", _HostOnlyConnector(app.port), SessionScope())
        port = await listener.start()
        assert listener.front is not None and listener.origin is not None
        host = f"Host: {listener.origin.hostname}:{port}\r\n".encode()
        try:
            for target, answer in ((b"/first", b"GET /first"), (b"/slow", b"GET /slow")):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"GET " + target + b" HTTP/1.1\r\n" + host + b"\r\n")
                if target == b"/slow":
                    await asyncio.to_thread(app.arrived.acquire, True, 10)
                    await asyncio.to_thread(app.arrived.acquire, True, 10)
                    await wait_for_handoff(listener)
                    app.go.set()
                await reader.readuntil(answer)
                writer.close()
                await all_closed(listener)
        finally:
            await listener.close()

    event_loop.run(main())
    first, slow = paths(traced)
    assert first[:3] == ["front", "start_task", "streaming"], first
    assert slow[:5] == ["front", "send_first", "in-flight", "start_task", "streaming"], slow
    assert first[-1] == slow[-1] == "closed"


async def wait_for_handoff(listener: AppListener) -> None:
    for _ in range(1000):
        if listener.connections:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the front door never handed the connection over")


def test_a_connection_starts_only_where_connections_start(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        for stage in Stage:
            if stage in (Stage.FRONT, Stage.WAITING):
                continue
            with pytest.raises(ValueError, match=f"not {stage}"):
                Connection(listener, Channel(1), "127.0.0.1", stage)

    run(app, body)
