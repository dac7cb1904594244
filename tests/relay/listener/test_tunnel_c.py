"""The C tunnel (:class:`sandbridge.relay.listener.tunnel.NativeTunnel`,
``relay/front/_tunnel.c``) against the Python one it speeds up
(:class:`~sandbridge.relay.listener.tunnel.Tunnel`, two pumps): the same scripts of a browser
and an app on real loopback TCP sockets, through each, must give each end the same bytes and
the same ends, and each tunnel must report its end once.

The scripts run in threads with blocking sockets (the browser and the app), the relay's
side in a uvloop event loop, as in the relay.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from sandbridge.aio import event_loop
from sandbridge.aio.unix_sockets import Pump
from sandbridge.relay.host.channel import READ_BYTES, Channel
from sandbridge.relay.listener.tunnel import NativeTunnel, Tunnel, native

KINDS = ["python", "c"]
# A short grace: the tests of the grace wait for it.
GRACE = 0.3
# What the browser's and the app's scripts may take, whatever happens.
PATIENCE = 20.0

pytestmark = pytest.mark.skipif(native() is None, reason="the C tunnel is not built")


@dataclass
class Ends:
    """What each end of one run received, and how its socket ended."""

    browser: bytes = b""
    app: bytes = b""
    browser_end: str = ""
    app_end: str = ""
    closed_calls: int = 0
    notes: list[str] = field(default_factory=list)


def _pair() -> tuple[socket.socket, socket.socket]:
    """A connected loopback TCP pair (outer end, relay's end)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        outer = socket.create_connection(listener.getsockname())
        inner, _ = listener.accept()
    outer.settimeout(PATIENCE)
    return outer, inner


def read_all(sock: socket.socket) -> tuple[bytes, str]:
    """Everything until the end of stream: the bytes and ``eof`` or ``reset``."""
    chunks: list[bytes] = []
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return b"".join(chunks), "reset"
        if not data:
            return b"".join(chunks), "eof"
        chunks.append(data)


Script = Callable[
    [socket.socket, socket.socket, Ends, "Tunnel | NativeTunnel", asyncio.AbstractEventLoop], None
]


def run_through(kind: str, script: Script, grace: float = GRACE) -> Ends:
    """``script(browser, app, ends)`` in a thread while the relay's two sockets are
    tunnelled by ``kind``; returns once the tunnel reported its end and the script ended."""
    browser, browser_inner = _pair()
    app, app_inner = _pair()
    ends = Ends()

    async def relay() -> None:
        loop = asyncio.get_running_loop()
        closed = loop.create_future()

        def on_closed() -> None:
            ends.closed_calls += 1
            if not closed.done():
                closed.set_result(None)

        _, a = await loop.connect_accepted_socket(lambda: Channel(READ_BYTES), browser_inner)
        _, b = await loop.connect_accepted_socket(lambda: Channel(READ_BYTES), app_inner)
        tunnel: Tunnel | NativeTunnel
        if kind == "c":
            module = native()
            assert module is not None and a.releasable() and b.releasable()
            tunnel = NativeTunnel(module, (a, b), grace, on_closed)
        else:
            sides = Pump(), Pump()
            sides[0].link(sides[1])
            a.hand_over(sides[0])
            b.hand_over(sides[1])

            def closed_later() -> None:  # (as the listener's: never from the pumps' call)
                loop.call_soon(on_closed)

            tunnel = Tunnel(sides[0], sides[1], grace, closed_later)
            a.catch_up(sides[0])
            b.catch_up(sides[1])
        worker = threading.Thread(target=script, args=(browser, app, ends, tunnel, loop))
        worker.start()
        await asyncio.wait_for(closed, PATIENCE)
        await asyncio.sleep(0)  # (a second report would come in this turn)
        await loop.run_in_executor(None, worker.join, PATIENCE)
        assert not worker.is_alive()

    try:
        event_loop.run(relay())
    finally:
        browser.close()
        app.close()
    return ends


def both(script: Script, grace: float = GRACE) -> dict[str, Ends]:
    return {kind: run_through(kind, script, grace) for kind in KINDS}


def test_messages_both_ways_arrive_whole_and_in_order() -> None:
    rng = random.Random(29)
    messages = [os.urandom(rng.choice([1, 2, 125, 1024, 70000])) for _ in range(60)]

    def script(
        browser: socket.socket,
        app: socket.socket,
        ends: Ends,
        tunnel: Tunnel | NativeTunnel,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        for index, message in enumerate(messages):
            sender, receiver = (browser, app) if index % 2 == 0 else (app, browser)
            sender.sendall(struct.pack("!I", len(message)) + message)
            head = b""
            while len(head) < 4:
                head += receiver.recv(4 - len(head))
            (length,) = struct.unpack("!I", head)
            body = b""
            while len(body) < length:
                body += receiver.recv(length - len(body))
            if receiver is app:
                ends.app += body
            else:
                ends.browser += body
        browser.shutdown(socket.SHUT_WR)
        app.shutdown(socket.SHUT_WR)
        ends.browser += read_all(browser)[0]
        ends.app += read_all(app)[0]

    results = both(script)
    expected_app = b"".join(messages[0::2])
    expected_browser = b"".join(messages[1::2])
    for kind, ends in results.items():
        assert (ends.app, ends.browser) == (expected_app, expected_browser), kind
        assert ends.closed_calls == 1, kind


def test_a_large_stream_to_a_slow_reader_arrives_whole() -> None:
    """Backpressure: the app reads 16 MiB slowly; nothing is lost or reordered."""
    payload = os.urandom(16 * 1024 * 1024)

    def script(
        browser: socket.socket,
        app: socket.socket,
        ends: Ends,
        tunnel: Tunnel | NativeTunnel,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        def send() -> None:
            browser.sendall(payload)
            browser.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        received: list[bytes] = []
        while data := app.recv(16384):
            received.append(data)
            if len(received) % 64 == 0:
                time.sleep(0.001)  # (a slow reader, not a synchronisation)
        sender.join()
        ends.app = b"".join(received)
        app.close()
        ends.browser, ends.browser_end = read_all(browser)

    for kind, ends in both(script).items():
        assert ends.app == payload, kind
        assert (ends.browser, ends.browser_end) == (b"", "eof"), kind


def test_a_half_close_is_passed_on_and_the_other_way_goes_on() -> None:
    def script(
        browser: socket.socket,
        app: socket.socket,
        ends: Ends,
        tunnel: Tunnel | NativeTunnel,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        browser.sendall(b"last words")
        browser.shutdown(socket.SHUT_WR)
        ends.app, ends.app_end = read_all(app)  # the browser's end arrives as the app's
        app.sendall(b"answer after the end")
        app.shutdown(socket.SHUT_WR)
        ends.browser, ends.browser_end = read_all(browser)

    for kind, ends in both(script, grace=5.0).items():
        assert (ends.app, ends.app_end) == (b"last words", "eof"), kind
        assert (ends.browser, ends.browser_end) == (b"answer after the end", "eof"), kind
        assert ends.closed_calls == 1, kind


def test_after_one_end_the_other_side_gets_the_grace_then_both_close() -> None:
    def script(
        browser: socket.socket,
        app: socket.socket,
        ends: Ends,
        tunnel: Tunnel | NativeTunnel,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        browser.shutdown(socket.SHUT_WR)
        started = time.monotonic()
        ends.app, ends.app_end = read_all(app)  # the end, then the close after the grace
        app.sendall(b"x")  # (the app never ends: the grace does)
        ends.browser, ends.browser_end = read_all(browser)
        ends.notes.append(f"{time.monotonic() - started:.3f}")

    for kind, ends in both(script).items():
        assert ends.app_end == "eof" and ends.browser_end in ("eof", "reset"), kind
        assert ends.closed_calls == 1, kind
        assert float(ends.notes[0]) >= GRACE * 0.9, (kind, ends.notes)


def test_a_reset_on_one_side_closes_the_other() -> None:
    def script(
        browser: socket.socket,
        app: socket.socket,
        ends: Ends,
        tunnel: Tunnel | NativeTunnel,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        browser.sendall(b"hello")
        assert app.recv(5) == b"hello"
        app.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        app.close()  # a reset
        ends.browser, ends.browser_end = read_all(browser)

    for kind, ends in both(script, grace=30.0).items():
        assert ends.browser == b"" and ends.browser_end in ("eof", "reset"), kind
        assert ends.closed_calls == 1, kind


def test_abort_closes_both_sides_and_reports_once() -> None:
    def script(
        browser: socket.socket,
        app: socket.socket,
        ends: Ends,
        tunnel: Tunnel | NativeTunnel,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        browser.sendall(b"ping")
        assert app.recv(4) == b"ping"
        loop.call_soon_threadsafe(tunnel.abort)
        ends.browser, ends.browser_end = read_all(browser)
        ends.app, ends.app_end = read_all(app)

    for kind, ends in both(script, grace=30.0).items():
        assert ends.browser_end in ("eof", "reset") and ends.app_end in ("eof", "reset"), kind
        assert ends.closed_calls == 1, kind


def test_the_c_tunnel_holds_no_tunnel_after_its_end() -> None:
    module = native()
    assert module is not None
    before = module.count()

    def script(
        browser: socket.socket,
        app: socket.socket,
        ends: Ends,
        tunnel: Tunnel | NativeTunnel,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        browser.close()
        app.close()

    run_through("c", script)
    assert module.count() == before
