"""WebSocket through an app origin, across a real sandbox, with a real client."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import request
from tests.e2e.features import FeatureSession, feature_session, served_by_a_daemon


@pytest.fixture(scope="module", params=["/", "/app", "/ served by the daemon"])
def session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FeatureSession]:
    base, _, served = str(request.param).partition(" ")
    with contextlib.ExitStack() as stack:
        if served:
            daemon = stack.enter_context(served_by_a_daemon(tmp_path_factory.mktemp("ws-xdg")))
        running = stack.enter_context(feature_session(tmp_path_factory.mktemp("ws"), base))
        if served:
            daemon.wait_line("sandbridge: daemon.session ", "stderr")
        yield running


def ws_log(session: FeatureSession) -> list[dict[str, object]]:
    log: list[dict[str, object]] = json.loads(request(session.port, path="/api/ws-log")[2])
    return log


def test_subprotocol_offer_reaches_the_app_and_its_choice_comes_back(
    session: FeatureSession,
) -> None:
    async def check() -> str | None:
        async with connect(session.ws_url, subprotocols=["chat.v2"]) as ws:  # type: ignore[list-item]
            return ws.subprotocol

    assert asyncio.run(check()) == "chat.v2"


@pytest.mark.parametrize("size", [1, 125, 126, 65_535, 65_536, 1 << 20, 16 << 20])
def test_text_and_binary_messages_echo_intact(session: FeatureSession, size: int) -> None:
    async def check() -> None:
        async with connect(session.ws_url, max_size=None) as ws:
            binary = bytes(i % 251 for i in range(min(size, 1 << 16))) * (size // (1 << 16) or 1)
            binary = (binary + bytes(size))[:size]
            await ws.send(binary)
            assert await ws.recv() == binary
            text = "é" * (size // 2) + "x" * (size % 2)
            await ws.send(text)
            assert await ws.recv() == text

    asyncio.run(check())


def test_ping_gets_pong(session: FeatureSession) -> None:
    async def check() -> float:
        async with connect(session.ws_url) as ws:
            pong = await ws.ping(b"are you there")
            return await asyncio.wait_for(pong, 5)

    assert asyncio.run(check()) >= 0


def test_app_close_code_and_reason_reach_the_client(session: FeatureSession) -> None:
    async def check() -> tuple[int, str]:
        async with connect(session.ws_url) as ws:
            await ws.send("close:4001:bye")
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 5)
            assert closed.value.rcvd is not None
            return closed.value.rcvd.code, closed.value.rcvd.reason

    assert asyncio.run(check()) == (4001, "bye")


def test_client_close_code_reaches_the_app(session: FeatureSession) -> None:
    async def check() -> None:
        async with connect(session.ws_url + "?tag=client-close") as ws:
            await ws.close(4002, "later")

    asyncio.run(check())
    entries = [e for e in ws_log(session) if e["tag"] == "client-close"]
    assert entries and entries[-1]["close_code"] == 4002


def test_app_going_away_closes_the_client_promptly(session: FeatureSession) -> None:
    async def check() -> None:
        async with connect(session.ws_url) as ws:
            await ws.send("abort")
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 5)

    asyncio.run(check())


def test_client_going_away_closes_the_app_side_promptly(session: FeatureSession) -> None:
    async def check() -> None:
        async with connect(session.ws_url + "?tag=client-abort") as ws:
            await ws.send("x")
            await ws.recv()
            ws.transport.abort()

    asyncio.run(check())
    status, _, body = request(session.port, path="/api/ws-log?wait=client-abort")
    assert status == 200 and b"client-abort" in body


def test_hundreds_of_concurrent_sockets(session: FeatureSession) -> None:
    async def one(index: int) -> str:
        async with connect(session.ws_url) as ws:
            await ws.send(f"socket {index}")
            reply = await ws.recv()
            assert isinstance(reply, str)
            return reply

    async def check() -> list[str]:
        return await asyncio.gather(*(one(i) for i in range(300)))

    assert asyncio.run(check()) == [f"socket {i}" for i in range(300)]
