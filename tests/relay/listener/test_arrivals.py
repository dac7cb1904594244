"""A new browser connection's way to its task (:mod:`sandbridge.relay.listener.arrivals`), attacked:
a first request sent to a parked app connection from the read callback, before the
connection's task exists, must keep every check and every limit of the task's own path.

An in-process app listener (its upstreams plain TCP to a scripted app, a real TCP server
whose connections run a script) and real browser sockets.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sandbridge.aio import event_loop
from sandbridge.relay.host.channel import Channel
from sandbridge.relay.host.settings import RelaySettings, SessionScope
from sandbridge.relay.listener.app_listener import AppListener
from tests.relay.listener.test_lane import (
    Script,
    ScriptedApp,
    _TcpConnector,
    answer_each,
    ok,
    scripted,
)

__all__ = ["scripted"]  # the fixture, used by name

Body = Callable[[AppListener, int, bytes], Awaitable[None]]


def run(app: ScriptedApp, body: Body, **settings: float) -> None:
    """Run ``body(listener, port, host_line)`` against an in-process listener for ``app``."""

    async def main() -> None:
        scope = SessionScope(RelaySettings(**settings))  # type: ignore[arg-type]
        listener = AppListener(app.port, "/", _TcpConnector(app.port), scope)
        port = await listener.start()
        assert listener.origin is not None
        host = f"Host: {listener.origin.hostname}:{port}\r\n".encode()
        try:
            await body(listener, port, host)
        finally:
            await listener.close()

    event_loop.run(main())


async def exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on a new connection, read until the relay closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def park_one(port: int, host: bytes) -> None:
    """One request on a connection of its own: its app connection is parked after it."""
    answer = await exchange(port, b"GET /park HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200"), answer


def test_a_first_request_for_another_host_never_reaches_a_parked_app_connection(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """DNS rebinding: a page of another name that resolves to the loopback address. The
    early path translates heads as the task does, and the task refuses them."""
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        await park_one(port, host)
        for bad in (b"Host: evil.example\r\n", b"Host: 127.0.0.1:%d\r\n" % port, b""):
            answer = await exchange(port, b"GET /steal HTTP/1.1\r\n" + bad + b"\r\n")
            assert answer.startswith((b"HTTP/1.1 4", b"HTTP/1.1 421")), answer
        assert await exchange(port, b"GET /ok HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n")

    run(app, body)
    assert [r.split(b"\r\n")[0] for r in app.requests] == [
        b"GET /park HTTP/1.1",
        b"GET /ok HTTP/1.1",
    ]


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_the_listener_closing_drops_the_connections_on_both_doorsteps(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """The app is closed by its owner while one connection has sent nothing and another's
    first request is at the app (unanswered): both browsers see the end, the app
    connection is closed, nothing counts any more and no descriptor stays open."""

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        app.read_request(conn)
        conn.sendall(ok(b"first"))
        app.read_request(conn)  # the early request: never answered
        app.read_request(conn)  # returns once the relay closes the connection

    app = scripted(script)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        before = fds()
        await park_one(port, host)
        silent = await asyncio.open_connection("127.0.0.1", port)
        early = await asyncio.open_connection("127.0.0.1", port)
        early[1].write(b"GET /early HTTP/1.1\r\n" + host + b"\r\n")
        await asyncio.to_thread(app.arrived.acquire, True, 10)
        await asyncio.to_thread(app.arrived.acquire, True, 10)
        assert len(listener._arrivals.in_flight) == 1  # type: ignore[union-attr]
        assert len(listener._arrivals.doorstep) == 1  # type: ignore[union-attr]
        await listener.close()
        for reader, writer in (silent, early):
            assert await asyncio.wait_for(reader.read(), 10) == b""
            writer.close()
        assert await asyncio.to_thread(app.closed_by_relay.wait, 10)
        assert listener.scope.budget.session.held == 0
        listener.scope.budget.check()
        for _ in range(1000):
            if fds() <= before:
                break
            await asyncio.sleep(0.01)
        assert fds() <= before

    run(app, body)


def test_connections_that_send_nothing_or_reset_leave_no_descriptor_behind(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        await park_one(port, host)
        before = fds()  # with one parked app connection: two descriptors, ours and the app's

        def allowed() -> int:  # more parked app connections may be kept, nothing else
            assert listener.pool is not None
            return before + 2 * max(0, len(listener.pool) - 1)

        for index in range(150):
            sock = socket.create_connection(("127.0.0.1", port))
            if index % 3 == 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            elif index % 3 == 1:
                sock.sendall(b"GET /gone HTTP/1.1\r\n" + host + b"\r\n")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            sock.close()
            await asyncio.sleep(0)
        for _ in range(3000):
            if listener.scope.budget.session.held == 0 and fds() <= allowed():
                break
            await asyncio.sleep(0.01)
        assert listener.scope.budget.session.held == 0
        listener.scope.budget.check()
        assert fds() <= allowed()
        answer = await exchange(port, b"GET /ok HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n")
        assert b"GET /ok HTTP/1.1" in answer

    run(app, body)


async def left_the_doorstep(listener: AppListener) -> None:
    """Until the connection whose first request is at the app has its task (the
    browser sent more, or ended)."""
    assert listener._arrivals is not None
    for _ in range(2000):
        if not listener._arrivals.in_flight:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the connection stayed on the in-flight doorstep")


def early_then_next(
    first_answer: bytes, method: bytes = b"GET", close: bool = False
) -> tuple[bytes, bytes, ScriptedApp]:
    """A parked app connection answers a new connection's early request with
    ``first_answer``; then another browser's request: what each browser got."""

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        if app.connections == 1:
            app.read_request(conn)
            conn.sendall(ok(b"first"))
            app.read_request(conn)
            conn.sendall(first_answer)
            if close:
                return
        answer_each(conn, app)

    app = ScriptedApp(script)
    got: list[bytes] = []

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        await park_one(port, host)
        got.append(
            await exchange(
                port, method + b" /early HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n"
            )
        )
        got.append(
            await exchange(port, b"GET /next HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n")
        )

    try:
        run(app, body, response_timeout=2)
    finally:
        app.close()
    return got[0], got[1], app


def test_an_interim_response_to_an_early_request_is_relayed_with_the_final_one() -> None:
    first, following, _ = early_then_next(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"final"))
    assert first.startswith(b"HTTP/1.1 100 Continue\r\n"), first
    assert first.endswith(b"final")
    assert b"HTTP/1.1 200" in first
    assert following.endswith(b"GET /next HTTP/1.1")


def test_a_101_to_an_early_request_that_did_not_upgrade_is_a_502() -> None:
    first, following, _ = early_then_next(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
        + ok(b"smuggled")
    )
    assert first.startswith(b"HTTP/1.1 502"), first
    assert b"smuggled" not in following
    assert following.endswith(b"GET /next HTTP/1.1")


def test_two_responses_to_an_early_request_never_answer_the_next_browser() -> None:
    first, following, _ = early_then_next(ok(b"one") + ok(b"two"))
    assert first.endswith(b"one")
    assert following.endswith(b"GET /next HTTP/1.1"), following


def test_a_head_response_with_a_body_never_answers_the_next_browser() -> None:
    first, following, _ = early_then_next(
        ok(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbad"), b"HEAD"
    )
    assert first.startswith(b"HTTP/1.1 200")
    assert b"bad" not in first
    assert following.endswith(b"GET /next HTTP/1.1"), following


def test_a_response_cut_by_the_app_mid_body_is_not_passed_as_whole() -> None:
    first, following, _ = early_then_next(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
    # the app keeps the connection open: the response timeout ends it; no reuse after
    assert len(first) < 200
    assert following.endswith(b"GET /next HTTP/1.1"), following


def test_a_late_answer_to_a_timed_out_early_request_never_answers_the_next_browser(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    go = asyncio.Event()

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        if app.connections == 1:
            app.read_request(conn)
            conn.sendall(ok(b"first"))
            app.read_request(conn)
            app.go.wait(10)
            conn.sendall(ok(b"late"))
        answer_each(conn, app)

    app = scripted(script)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        await park_one(port, host)
        first = await exchange(port, b"GET /slow HTTP/1.1\r\n" + host + b"\r\n")
        assert first.startswith(b"HTTP/1.1 502"), first
        app.go.set()
        following = await exchange(
            port, b"GET /next HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n"
        )
        assert following.endswith(b"GET /next HTTP/1.1"), following
        go.set()

    run(app, body, response_timeout=0.5)


def test_a_browser_gone_while_its_early_request_is_at_the_app_leaves_nothing_dirty(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """Half-closed and reset browsers: the next browser gets the answer to its request."""

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        while (request := app.read_request(conn)) is not None:
            if b"/leaving" in request:
                app.go.wait(10)
                app.go.clear()
                conn.sendall(ok(b"for the one who left"))
            else:
                conn.sendall(ok(request.split(b"\r\n", 1)[0]))

    app = scripted(script)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        for reset in (False, True, False, True):
            await park_one(port, host)
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"GET /leaving HTTP/1.1\r\n" + host + b"\r\n")
            await asyncio.to_thread(app.arrived.acquire, True, 10)
            await asyncio.to_thread(app.arrived.acquire, True, 10)
            if reset:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            else:
                sock.shutdown(socket.SHUT_WR)
            sock.close()
            await left_the_doorstep(listener)  # the relay saw the end before the answer
            app.go.set()
            for _ in range(3):
                following = await exchange(
                    port, b"GET /next HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n"
                )
                assert following.endswith(b"GET /next HTTP/1.1"), following
                app.arrived.acquire(timeout=10)

    run(app, body)


def test_a_request_pipelined_behind_an_early_one_is_answered_after_it(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    def script(conn: socket.socket, app: ScriptedApp) -> None:
        if app.connections == 1:
            app.read_request(conn)
            conn.sendall(ok(b"first"))
            app.read_request(conn)
            app.go.wait(10)
            conn.sendall(ok(b"early"))
        answer_each(conn, app)

    app = scripted(script)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        await park_one(port, host)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /a HTTP/1.1\r\n" + host + b"\r\n")
        await asyncio.to_thread(app.arrived.acquire, True, 10)
        await asyncio.to_thread(app.arrived.acquire, True, 10)
        writer.write(b"GET /b HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n")
        await writer.drain()
        await left_the_doorstep(listener)  # /b arrived before /a's answer
        app.go.set()
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert answer.index(b"early") < answer.index(b"GET /b HTTP/1.1"), answer

    run(app, body)


def test_a_first_request_split_at_every_byte_is_served_once(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        await park_one(port, host)
        whole = b"GET /split HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n"
        for cut in range(1, len(whole)):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(whole[:cut])
            await writer.drain()
            await asyncio.sleep(0.002)
            writer.write(whole[cut:])
            answer = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            assert answer.endswith(b"GET /split HTTP/1.1"), (cut, answer)

    run(app, body)


def test_a_connection_accepted_as_the_listener_closes_is_dropped(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """The event loop accepts a connection and delivers it (connection_made) a callback
    later; the owner closes the app in between. The late connection must not wait on a
    doorstep nobody closes any more, count, and then be served by the closed app."""
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        accepted: list[Channel] = []
        deliver = listener._accept
        listener._accept = accepted.append  # type: ignore[method-assign,assignment]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(1000):
            if accepted:
                break
            await asyncio.sleep(0.005)
        assert accepted
        closing = asyncio.create_task(listener.close())
        await asyncio.sleep(0)  # close() has begun: the server and the doorsteps are closed
        deliver(accepted[0])  # connection_made, one callback late
        writer.write(b"GET /after-close HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n")
        try:
            answer = await asyncio.wait_for(reader.read(), 10)
        except ConnectionResetError:
            answer = b""  # dropped
        writer.close()
        await closing
        assert answer == b"", answer
        assert listener.scope.budget.session.held == 0
        listener.scope.budget.check()

    run(app, body)
    assert b"GET /after-close HTTP/1.1" not in b"".join(app.requests)


def test_a_private_apps_first_request_passes_its_gate_even_with_a_parked_connection(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """A private app's first requests never take the early path: with the app's cookie
    they are served (on the parked app connection), without it, with another app's or
    with a token that is not the app's, refused, and the app sees none of them."""
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        token_path = listener.url_suffix.encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /" + token_path + b" HTTP/1.1\r\n" + host + b"\r\n")
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 303"), answer
        cookie = answer.split(b"Set-Cookie: ", 1)[1].split(b";", 1)[0]
        with_cookie = b"Cookie: " + cookie + b"\r\nConnection: close\r\n\r\n"
        for index in range(3):  # the first parks its app connection, the next take it
            answer = await exchange(port, b"GET /in/%d HTTP/1.1\r\n" % index + host + with_cookie)
            assert answer.endswith(b"GET /in/%d HTTP/1.1" % index), answer
        name, value = cookie.split(b"=", 1)
        for extra in (
            b"",
            name + b"=" + value[:-1] + (b"A" if value[-1:] != b"A" else b"B"),
            b"sandbridge_other=" + value,
        ):
            head = b"GET /out HTTP/1.1\r\n" + host + b"Cookie: " + extra + b"\r\n\r\n"
            answer = await exchange(port, head)
            assert answer.startswith(b"HTTP/1.1 403"), answer
            answer = await exchange(port, b"GET /?sandbridge_token=0 HTTP/1.1\r\n" + host + b"\r\n")
            assert answer.startswith(b"HTTP/1.1 403"), answer
        assert listener.pool is not None and len(listener.pool) == 1

    run(app, body, private=True)
    assert all(b"/out" not in r and b"token" not in r for r in app.requests)


def test_a_task_cancelled_before_it_ran_gives_its_connections_place_back(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """The owner closes the app in the loop turn in which a connection's first bytes
    started its task, before the task's first step: the task is cancelled before its
    body (and its ``finally``) ever runs. The connection must still stop counting toward
    the session's limit, or each such close would take a place for good."""
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        closing: list[asyncio.Future[None]] = []
        spawn = listener.tasks.spawn

        def spawn_as_the_app_closes(coroutine: Any) -> asyncio.Task[Any]:
            if not closing:  # close() is due in this turn, before the new task's first step
                closing.append(asyncio.ensure_future(listener.close()))
            return spawn(coroutine)

        listener.tasks.spawn = spawn_as_the_app_closes  # type: ignore[method-assign]
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /x HTTP/1.1\r\n" + host + b"\r\n")
        for _ in range(1000):
            if closing:
                break
            await asyncio.sleep(0.005)
        await closing[0]
        writer.close()
        assert listener.scope.budget.session.held == 0
        listener.scope.budget.check()
        assert not listener.connections

    run(app, body)


@pytest.mark.parametrize(
    ("line", "extra"),
    [(b" HTTP/1.1\r\n", b"Connection: close\r\n"), (b" HTTP/1.0\r\n", b"")],
    ids=["connection-close", "http-1.0"],
)
def test_a_token_exchange_asked_to_close_is_answered_and_closed(
    scripted: Callable[[Script], ScriptedApp], line: bytes, extra: bytes
) -> None:
    """``Connection: close`` and HTTP/1.0 on a private app's token URL: the 303 says the
    connection closes, and it does (it used to say keep-alive and hold the connection
    for the keep-alive timeout, a client reading to the end waiting all that time)."""
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        target = b"GET /" + listener.url_suffix.encode()
        answer = await exchange(port, target + line + host + extra + b"\r\n")
        assert answer.startswith(b"HTTP/1.1 303"), answer
        assert b"Connection: close\r\n" in answer
        assert b"keep-alive" not in answer

    run(app, body, private=True, keepalive_timeout=60)


def test_a_refusal_cancelled_before_it_ran_still_closes_its_connection(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """A connection past the limit is refused by a task of its own; the owner closes
    the app in the same loop turn, before that task's first step. The connection counted
    nowhere, so only that task could close it: it must not stay open for good (a
    descriptor per refused connection of a flood that meets the close)."""
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        closing: list[asyncio.Future[None]] = []
        spawn = listener.tasks.spawn
        silent = await asyncio.open_connection("127.0.0.1", port)  # holds the one place
        for _ in range(1000):
            if listener.scope.budget.session.held:
                break
            await asyncio.sleep(0.005)

        def spawn_as_the_app_closes(coroutine: Any) -> asyncio.Task[Any]:
            if not closing:  # close() is due in this turn, before the refusal's first step
                closing.append(asyncio.ensure_future(listener.close()))
            return spawn(coroutine)

        listener.tasks.spawn = spawn_as_the_app_closes  # type: ignore[method-assign]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            answer = await asyncio.wait_for(reader.read(), 10)
        except ConnectionResetError:
            answer = b""
        assert closing
        await closing[0]
        writer.close()
        silent[1].close()
        assert answer == b"", answer

    run(app, body, max_connections_per_app=1)


def test_an_app_closing_mid_response_to_an_early_request_never_passes_it_as_whole() -> None:
    first, following, _ = early_then_next(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", close=True
    )
    assert first.startswith(b"HTTP/1.1 200 OK\r\n"), first
    assert first.endswith(b"\r\n\r\nshort")  # cut there, as the app cut it
    assert b"Content-Length: 100\r\n" in first
    assert following.endswith(b"GET /next HTTP/1.1"), following


def test_an_app_closing_mid_head_of_an_early_request_sends_it_again() -> None:
    first, following, _ = early_then_next(b"HTTP/1.1 200 OK\r\nContent-Le", close=True)
    # a parked connection the app closed before a whole head: the GET goes again
    assert first.endswith(b"GET /early HTTP/1.1"), first
    assert first.count(b"HTTP/1.1 ") == 1  # only the retry's answer
    assert following.endswith(b"GET /next HTTP/1.1"), following


@pytest.mark.parametrize("token", [b"%C3%A9", b"%FF", b"%E2%82%AC" * 20], ids=str)
def test_a_token_that_is_not_ascii_is_refused_as_a_wrong_one(
    scripted: Callable[[Script], ScriptedApp], token: bytes
) -> None:
    """A private app's token URL with a percent-encoded non-ASCII token: ``hmac``
    compares no such ``str``, and the ``TypeError`` ended the connection's task with a
    traceback and no answer. It is a wrong token: 403, and the real one still works."""
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        answer = await exchange(
            port, b"GET /?sandbridge_token=" + token + b" HTTP/1.1\r\n" + host + b"\r\n"
        )
        assert answer.startswith(b"HTTP/1.1 403"), answer
        target = b"GET /" + listener.url_suffix.encode()
        answer = await exchange(
            port, target + b" HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n"
        )
        assert answer.startswith(b"HTTP/1.1 303"), answer

    run(app, body, private=True)
    assert not app.requests


def test_bytes_sent_behind_an_early_request_do_not_extend_its_response_timeout(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """The browser sends more while its early request waits at an app that never
    answers: the connection's task starts, and it waited a whole response timeout anew
    (up to twice the timeout in all). The 502 comes one response timeout after the
    request went out, as on the task's own path."""

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        if app.connections == 1:
            app.read_request(conn)
            conn.sendall(ok(b"first"))
            app.read_request(conn)
            app.go.wait(30)  # never answers
            return
        answer_each(conn, app)

    app = scripted(script)
    timeout = 2.0

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        await park_one(port, host)
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /never HTTP/1.1\r\n" + host + b"\r\n")
        sent = loop.time()
        await asyncio.to_thread(app.arrived.acquire, True, 10)
        await asyncio.to_thread(app.arrived.acquire, True, 10)
        await asyncio.sleep(timeout * 0.75)  # most of the timeout has passed
        writer.write(b"G")  # a pipelined head begins: the connection's task starts
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
        waited = loop.time() - sent
        writer.close()
        app.go.set()
        assert answer.startswith(b"HTTP/1.1 502"), answer
        assert waited < timeout * 1.5, waited

    run(app, body, response_timeout=timeout)


@pytest.mark.parametrize("coding", [b"gzip", b"gzip, chunked"])
def test_a_response_transfer_coding_other_than_chunked_is_a_502(coding: bytes) -> None:
    """An app's body in a transfer coding other than chunked alone: the relay dropped the
    coding and sent the bytes as they came (a close-delimited one cut short, as
    incomplete, under ``Connection: keep-alive``). It is a 502, and the app connection
    serves nobody after it."""
    body = b"1f\r\n" + b"x" * 0x1F + b"\r\n0\r\n\r\n" if b"chunked" in coding else b"x" * 31
    first, following, _ = early_then_next(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: " + coding + b"\r\n\r\n" + body, close=True
    )
    assert first.startswith(b"HTTP/1.1 502"), first
    assert b"Transfer-Encoding" in first
    assert b"x" * 31 not in first
    assert following.endswith(b"GET /next HTTP/1.1"), following


def test_a_browser_that_reads_nothing_of_its_response_is_dropped_after_the_response_timeout(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """A browser connection that sends a request and never reads the answer: every
    write waits for it (backpressure), and nothing bounded the wait: its place in the
    connection limits and its app connection were held for good, past every timeout.
    Taking nothing of a response for ``--response-timeout`` now ends the connection."""

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        app.read_request(conn)
        body = b"x" * (32 * 1024 * 1024)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    app = scripted(script)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET /big HTTP/1.1\r\n" + host + b"\r\n")
        await asyncio.to_thread(app.arrived.acquire, True, 10)
        for _ in range(1000):
            if listener.scope.budget.session.held == 0 and not listener.tasks:
                break
            await asyncio.sleep(0.01)
        sock.close()
        assert listener.scope.budget.session.held == 0
        listener.scope.budget.check()
        assert not listener.tasks

    run(app, body, response_timeout=1, keepalive_timeout=60)


def test_a_browser_that_reads_nothing_leaves_nothing_behind_once_its_connection_ends(
    scripted: Callable[[Script], ScriptedApp],
) -> None:
    """A ``Connection: close`` response that fits in the write buffer (no write waits)
    to a browser that reads none of it: closing waits to send what is buffered, and the
    task waited for that close for good, its socket and buffer with it, after the
    connection had stopped counting toward any limit (so a client could pile them up
    without end). The close has the response timeout, then the connection is dropped."""

    def script(conn: socket.socket, app: ScriptedApp) -> None:
        request = app.read_request(conn)
        assert request is not None
        size = int(request.split(b" ")[1].rsplit(b"/", 1)[1])
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size + b"x" * size)

    app = scripted(script)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        browsers: list[tuple[socket.socket, Channel]] = []
        for size in range(40_000, 200_000, 20_000):  # some leave the buffer below its limit
            sock = socket.create_connection(("127.0.0.1", port))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
            seen = {channel for _, channel in browsers}
            while not listener.connections.keys() - seen:
                await asyncio.sleep(0.001)
            (channel,) = listener.connections.keys() - seen
            assert channel.transport is not None
            relays_end = channel.transport.get_extra_info("socket")
            relays_end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1024)
            sock.sendall(b"GET /size/%d HTTP/1.1\r\n" % size + host + b"Connection: close\r\n\r\n")
            browsers.append((sock, channel))
        for _ in range(1000):
            if listener.scope.budget.session.held == 0 and not listener.tasks:
                break
            await asyncio.sleep(0.01)
        for sock, _ in browsers:
            sock.close()
        assert listener.scope.budget.session.held == 0
        listener.scope.budget.check()
        assert not listener.tasks, "a task waits for its browser to read"

    run(app, body, response_timeout=1, keepalive_timeout=60)


@pytest.mark.parametrize("kept", [False, True], ids=["first-read", "kept-connection"])
def test_a_flood_of_pipelined_requests_in_one_read_is_refused_before_any_reaches_the_app(
    scripted: Callable[[Script], ScriptedApp], kept: bool
) -> None:
    app = scripted(answer_each)

    async def body(listener: AppListener, port: int, host: bytes) -> None:
        await park_one(port, host)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        if kept:
            writer.write(b"GET /kept HTTP/1.1\r\n" + host + b"\r\n")
            await reader.readuntil(b"GET /kept HTTP/1.1")
        writer.write((b"GET /flood HTTP/1.1\r\n" + host + b"\r\n") * 1000)
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert answer.rsplit(b"HTTP/1.1 ", 1)[1].startswith(b"400"), answer[-300:]
        assert b"requests pipelined in one read" in answer

    run(app, body)
    assert not any(b"/flood" in request for request in app.requests)
