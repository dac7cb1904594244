"""The paced Unix socket server on real sockets: it serves as asyncio's does, accepts no
faster than its window allows (the rest wait in the kernel's backlog), and stops
accepting when closed."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

from sandbridge.aio import event_loop
from sandbridge.aio.before_loop import bind_unix_socket
from sandbridge.aio.paced_server import PacedServer


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"got " + await reader.readline())
    await writer.drain()
    writer.close()


async def _ask(path: Path, line: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(line)
    answer = await reader.read()
    writer.close()
    return answer


def test_it_serves_each_connection_with_the_handler(tmp_path: Path) -> None:
    path = tmp_path / "paced.sock"

    async def scenario() -> list[bytes]:
        server = PacedServer(_echo, bind_unix_socket(path), 100, 1.0)
        try:
            return list(await asyncio.gather(*(_ask(path, b"%d\n" % n) for n in range(5))))
        finally:
            server.close()
            await server.wait_closed()

    assert sorted(event_loop.run(scenario())) == [b"got %d\n" % n for n in range(5)]


def test_connections_past_the_window_wait_their_turn_in_the_backlog(tmp_path: Path) -> None:
    path = tmp_path / "paced.sock"
    limit, window, total = 5, 0.2, 20

    async def scenario() -> tuple[float, list[bytes]]:
        loop = asyncio.get_running_loop()
        server = PacedServer(_echo, bind_unix_socket(path), limit, window)
        try:
            start = loop.time()
            answers = await asyncio.gather(*(_ask(path, b"x\n") for _ in range(total)))
            return loop.time() - start, list(answers)
        finally:
            server.close()
            await server.wait_closed()

    elapsed, answers = event_loop.run(scenario())
    assert answers == [b"got x\n"] * total  # all served, none refused
    # 5 at once, then 5 per window: the last 5 no sooner than three windows in (in the
    # loop's millisecond clock: less a float tolerance).
    assert elapsed >= (total // limit - 1) * window - 1e-6


def test_a_closed_server_accepts_no_more(tmp_path: Path) -> None:
    path = tmp_path / "paced.sock"

    async def scenario() -> None:
        server = PacedServer(_echo, bind_unix_socket(path), 100, 1.0)
        assert await _ask(path, b"one\n") == b"got one\n"
        server.close()
        await server.wait_closed()
        with socket.socket(socket.AF_UNIX) as client:
            try:
                client.connect(str(path))
            except OSError:
                return  # refused: nothing listens
            client.settimeout(5)
            assert client.recv(1) == b""  # or closed without an answer

    event_loop.run(scenario())


OUT_OF_DESCRIPTORS = """
import asyncio, os, sys
from sandbridge.aio.before_loop import bind_unix_socket
from sandbridge.aio.paced_server import PacedServer

async def main():
    loop = asyncio.get_running_loop()
    async def handler(reader, writer):
        writer.write(b"served\\n")
        await writer.drain()
        writer.close()
    server = PacedServer(handler, bind_unix_socket(sys.argv[1]), 100, 1.0)
    hogs = []
    freed = asyncio.Event()
    def free():
        os.read(0, 1)
        loop.remove_reader(0)
        for fd in hogs:
            os.close(fd)
        freed.set()
    loop.add_reader(0, free)
    try:
        while True:
            hogs.append(os.dup(1))
    except OSError:
        pass
    print("FULL", flush=True)
    await freed.wait()
    await asyncio.sleep(30)

asyncio.run(main())
"""


def test_accepting_pauses_while_descriptors_run_out_and_then_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "paced.sock"
    server = subprocess.Popen(
        [sys.executable, "-c", OUT_OF_DESCRIPTORS, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        assert server.stdout.readline() == b"FULL\n"
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(30)
            client.connect(str(path))  # waits in the backlog: accept fails with EMFILE
            server.stdin.write(b"x")
            server.stdin.flush()  # descriptors freed: the next try accepts it
            assert client.recv(64) == b"served\n"
    finally:
        server.kill()
        stderr = server.communicate()[1].decode()
    assert "socket.accept_paused" in stderr
