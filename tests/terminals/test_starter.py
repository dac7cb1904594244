"""``terminal.sock`` inside a container (``sandbridge shim --terminals``): one real PTY
worker per connection, a bounded number at once, the socket private and cleaned up."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
from pathlib import Path

import pytest

from sandbridge.terminals import channel, frames, starter
from sandbridge.terminals.framed_stream import FramedStream, json_body
from sandbridge.terminals.frames import FROM_WORKER, Kind


async def _connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
    await asyncio.get_running_loop().sock_connect(sock, str(path))
    return sock


def test_each_connection_is_the_link_of_a_new_worker(tmp_path: Path) -> None:
    path = tmp_path / "terminal.sock"

    async def scenario() -> None:
        listener = starter.bind_terminal_socket(path)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        serving = asyncio.create_task(starter.serve_terminal_socket(listener, path))
        try:
            reader, writer = await asyncio.open_unix_connection(str(path))
            worker = FramedStream(reader, writer, FROM_WORKER)
            public, _ = channel.keypair()
            start = {
                "client_public": public.hex(), "rows": 24, "cols": 80, "term": "xterm",
                "lease": 5, "final": False, "idle": 60, "hangup_grace": 0.5,
            }  # fmt: skip
            writer.write(frames.encode(Kind.START, json.dumps(start).encode()))
            ready = await asyncio.wait_for(worker.next(), 20)
            assert ready is not None and ready.kind is Kind.READY
            assert len(bytes.fromhex(str(json_body(ready)["public"]))) == channel.PUBLIC_BYTES
            await worker.close()
        finally:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
        assert not path.exists(), "the shim removes its socket at the end"

    asyncio.run(asyncio.wait_for(scenario(), 40))


def test_past_the_worker_limit_a_connection_is_closed_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(starter, "MAX_SOCKET_WORKERS", 2)
    path = tmp_path / "terminal.sock"

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        listener = starter.bind_terminal_socket(path)
        serving = asyncio.create_task(starter.serve_terminal_socket(listener, path))
        links = []
        try:
            links = [await _connect(path) for _ in range(2)]  # two workers wait for START
            extra = await _connect(path)
            links.append(extra)
            assert await asyncio.wait_for(loop.sock_recv(extra, 1), 10) == b""
        finally:
            for link in links:
                link.close()
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)

    asyncio.run(asyncio.wait_for(scenario(), 40))


def test_a_stale_socket_is_replaced_and_a_replacement_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "terminal.sock"
    path.write_text("left by a previous shim")

    async def scenario() -> None:
        listener = starter.bind_terminal_socket(path)
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        serving = asyncio.create_task(starter.serve_terminal_socket(listener, path))
        await asyncio.sleep(0)  # serving: it has noted which socket it bound
        path.unlink()
        path.write_text("someone else's now")
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)

    asyncio.run(asyncio.wait_for(scenario(), 10))
    assert path.read_text() == "someone else's now"
