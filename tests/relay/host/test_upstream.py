"""The host never connects through an upstream.sock the sandbox has swapped, and never
waits for one on its event loop."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

from sandbridge.exceptions import UpstreamError
from sandbridge.relay.host import upstream


def connect_unix_checked(path: Path) -> socket.socket:
    return asyncio.run(upstream.connect_unix_checked(path))


def test_real_socket_is_connected(tmp_path: Path) -> None:
    path = tmp_path / "upstream.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen()
        connect_unix_checked(path).close()


def test_symlink_to_a_host_socket_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "host-service.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(target))
        server.listen()
        link = tmp_path / "upstream.sock"
        link.symlink_to(target)
        with pytest.raises(UpstreamError, match="is a symlink"):
            connect_unix_checked(link)


def test_regular_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "upstream.sock"
    path.write_text("")
    with pytest.raises(UpstreamError, match="not a socket"):
        connect_unix_checked(path)


def test_fifo_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "upstream.sock"
    os.mkfifo(path)
    with pytest.raises(UpstreamError, match="not a socket"):
        connect_unix_checked(path)


def test_missing_socket_says_so(tmp_path: Path) -> None:
    with pytest.raises(UpstreamError, match="does not exist"):
        connect_unix_checked(tmp_path / "upstream.sock")


def _full_listener(path: Path) -> tuple[socket.socket, socket.socket]:
    """A listener that has not accepted, its queue full (backlog 0, one waiting)."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(0)
    filler = socket.socket(socket.AF_UNIX)
    filler.connect(str(path))
    return server, filler


def test_a_shim_that_never_accepts_costs_a_refusal_not_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upstream, "STREAM_OPEN_TIMEOUT", 0.5)
    server, filler = _full_listener(tmp_path / "upstream.sock")

    async def scenario() -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        try:
            with pytest.raises(UpstreamError, match=r"accepted no connection for 0\.5 s"):
                await upstream.connect_unix_checked(tmp_path / "upstream.sock")
        finally:
            task.cancel()
        return ticks

    with server, filler:
        assert asyncio.run(scenario()) >= 10, "the event loop was blocked"


def test_a_full_queue_is_waited_for_until_the_shim_accepts(tmp_path: Path) -> None:
    server, filler = _full_listener(tmp_path / "upstream.sock")

    async def scenario() -> None:
        connecting = asyncio.create_task(upstream.connect_unix_checked(tmp_path / "upstream.sock"))
        await asyncio.sleep(0)  # let it find the queue full
        assert not connecting.done()
        accepted, _ = server.accept()  # room in the queue: the connect goes through
        accepted.close()
        (await asyncio.wait_for(connecting, 5)).close()

    with server, filler:
        asyncio.run(scenario())
