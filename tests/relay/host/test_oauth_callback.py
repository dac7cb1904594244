"""One login's callback on the host's loopback, carried to the sandbox's listener: real
TCP listeners and clients, a real Unix-socket stand-in for the sandbox's side."""

from __future__ import annotations

import asyncio
import errno
import socket
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from sandbridge.protocol.oauth_redirect import LoopbackRedirect
from sandbridge.relay.host.channel import Channel
from sandbridge.relay.host.oauth_callback import Ending, OAuthCallback
from tests.conftest import free_port
from tests.relay.host.test_local_peer import AS_NOBODY

LOGIN_PAGE = b"<p>Logged in. You may close this window."
LOGIN_ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nSet-Cookie: sid=planted; Path=/\r\n"
    b"Content-Length: %d\r\n\r\n" % len(LOGIN_PAGE) + LOGIN_PAGE
)


class SandboxLogin:
    """The login's listener inside, on a Unix socket: records each request it gets."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.requests: list[bytes] = []
        self._server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> SandboxLogin:
        self._server = await asyncio.start_unix_server(self._serve, self.path)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.requests.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(LOGIN_ANSWER)
        await writer.drain()
        writer.close()

    def opener(self) -> Callable[[int], Awaitable[tuple[Channel, bytes] | None]]:
        async def open_port(port: int) -> tuple[Channel, bytes]:
            loop = asyncio.get_running_loop()
            _, channel = await loop.create_unix_connection(lambda: Channel(65536), str(self.path))
            return channel, b""

        return open_port


async def fetch(port: int, request: bytes, host: str = "127.0.0.1") -> bytes:
    """Send ``request`` as a browser would and read the answer to its end."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(request)
    answer = await reader.read()
    writer.close()
    return answer


def get(path: str, host: str) -> bytes:
    return (
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/html\r\n"
        "Cookie: owner_session=secret\r\n\r\n"
    ).encode()


def test_the_callback_reaches_the_sandbox_and_its_answer_the_browser(tmp_path: Path) -> None:
    port = free_port()
    redirect = LoopbackRedirect("127.0.0.1", port, "/callback")

    async def main() -> tuple[bytes, list[bytes], Ending | None]:
        async with SandboxLogin(tmp_path / "login.sock") as login:
            callback = OAuthCallback(redirect, login.opener(), "auth.example.com")
            await callback.start()
            waiting = asyncio.create_task(callback.run())
            answer = await fetch(port, get("/callback?code=c0de&state=s1", f"127.0.0.1:{port}"))
            await waiting
            return answer, login.requests, callback.ending

    answer, requests, ending = asyncio.run(main())
    assert ending is Ending.RELAYED
    (request,) = requests
    assert request.startswith(b"GET /callback?code=c0de&state=s1 HTTP/1.1\r\n")
    assert b"Host: 127.0.0.1:%d\r\n" % port in request
    assert b"Accept: text/html" in request
    assert b"owner_session" not in request  # the owner's loopback cookies stay home
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert b"Content-Security-Policy: sandbox" in head
    assert b"Referrer-Policy: no-referrer" in head
    assert b"Set-Cookie" not in head  # no cookie planted on the owner's loopback
    assert body == LOGIN_PAGE


def test_a_second_callback_finds_nothing_listening(tmp_path: Path) -> None:
    port = free_port()
    redirect = LoopbackRedirect("127.0.0.1", port, "/cb")

    async def main() -> None:
        async with SandboxLogin(tmp_path / "login.sock") as login:
            callback = OAuthCallback(redirect, login.opener(), "auth.example.com")
            await callback.start()
            waiting = asyncio.create_task(callback.run())
            await fetch(port, get("/cb?code=1", f"127.0.0.1:{port}"))
            await waiting
            with pytest.raises(ConnectionRefusedError):
                await fetch(port, get("/cb?code=2", f"127.0.0.1:{port}"))
            assert len(login.requests) == 1

    asyncio.run(main())


def test_a_late_callback_finds_nothing_listening(tmp_path: Path) -> None:
    port = free_port()
    redirect = LoopbackRedirect("127.0.0.1", port, "/cb")

    async def main() -> None:
        async with SandboxLogin(tmp_path / "login.sock") as login:
            callback = OAuthCallback(redirect, login.opener(), "auth.example.com", deadline=0.2)
            await callback.start()
            await callback.run()  # returns at the deadline
            assert callback.ending is Ending.EXPIRED
            with pytest.raises(ConnectionRefusedError):
                await fetch(port, get("/cb?code=late", f"127.0.0.1:{port}"))
            assert login.requests == []

    asyncio.run(main())


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /other?code=x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n", b"404"),
        (b"GET /favicon.ico HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n", b"404"),
        (b"GET /cb?code=x HTTP/1.1\r\nHost: evil.example:{port}\r\n\r\n", b"400"),
        (b"GET /cb?code=x HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n", b"400"),
        (b"GET /cb?code=x HTTP/1.1\r\n\r\n", b"400"),
        (b"POST /cb HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 3\r\n\r\nabc", b"405"),
        (b"GET /cb HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 3\r\n\r\nabc", b"400"),
        (b"GET /cb/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n", b"404"),
        (b"GET http://127.0.0.1:{port}/cb HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n", b"404"),
    ],
)
def test_a_request_that_is_not_the_callback_is_refused_and_the_callback_still_awaited(
    tmp_path: Path, request_bytes: bytes, status: bytes
) -> None:
    port = free_port()
    redirect = LoopbackRedirect("127.0.0.1", port, "/cb")

    async def main() -> None:
        async with SandboxLogin(tmp_path / "login.sock") as login:
            callback = OAuthCallback(redirect, login.opener(), "auth.example.com")
            await callback.start()
            waiting = asyncio.create_task(callback.run())
            refused = await fetch(port, request_bytes.replace(b"{port}", b"%d" % port))
            assert refused.startswith(b"HTTP/1.1 " + status), refused
            assert login.requests == []
            answer = await fetch(port, get("/cb?code=1", f"127.0.0.1:{port}"))
            assert answer.startswith(b"HTTP/1.1 200")
            await waiting

    asyncio.run(main())


def test_a_localhost_redirect_is_awaited_on_both_loopback_addresses(tmp_path: Path) -> None:
    port = free_port()
    redirect = LoopbackRedirect("localhost", port, "/cb")

    async def main() -> None:
        async with SandboxLogin(tmp_path / "login.sock") as login:
            callback = OAuthCallback(redirect, login.opener(), "auth.example.com")
            await callback.start()
            waiting = asyncio.create_task(callback.run())
            answer = await fetch(port, get("/cb?code=6", f"localhost:{port}"), host="::1")
            assert answer.startswith(b"HTTP/1.1 200")
            await waiting
            with pytest.raises(ConnectionRefusedError):
                await fetch(port, get("/cb?code=4", f"localhost:{port}"), host="127.0.0.1")

    asyncio.run(main())


def test_a_port_taken_on_the_host_is_said_at_start(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        redirect = LoopbackRedirect("127.0.0.1", port, "/cb")

        async def main() -> None:
            async with SandboxLogin(tmp_path / "login.sock") as login:
                callback = OAuthCallback(redirect, login.opener(), "auth.example.com")
                with pytest.raises(OSError) as failed:
                    await callback.start()
                assert failed.value.errno == errno.EADDRINUSE

        asyncio.run(main())


def test_no_listener_inside_is_a_502_and_ends_the_callback(tmp_path: Path) -> None:
    port = free_port()
    redirect = LoopbackRedirect("127.0.0.1", port, "/cb")
    login = SandboxLogin(tmp_path / "nothing-here.sock")  # never started

    async def main() -> None:
        callback = OAuthCallback(redirect, login.opener(), "auth.example.com")
        await callback.start()
        waiting = asyncio.create_task(callback.run())
        answer = await fetch(port, get("/cb?code=1", f"127.0.0.1:{port}"))
        await waiting
        assert answer.startswith(b"HTTP/1.1 502")
        assert b"code=1" not in answer
        assert callback.ending is Ending.FAILED

    asyncio.run(main())


# Run as another user: the callback request; prints what came back (b'' when closed).
CALLBACK_AS_ANOTHER_USER = """
import socket, sys
port = int(sys.argv[1])
with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
    sock.sendall(b"GET /cb?code=stolen HTTP/1.1\\r\\nHost: 127.0.0.1:%d\\r\\n\\r\\n" % port)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
print(repr(data))
"""


def test_another_users_callback_is_closed_unanswered_and_never_reaches_the_sandbox(
    tmp_path: Path,
) -> None:
    port = free_port()
    redirect = LoopbackRedirect("127.0.0.1", port, "/cb")

    async def main() -> None:
        async with SandboxLogin(tmp_path / "login.sock") as login:
            callback = OAuthCallback(redirect, login.opener(), "auth.example.com")
            await callback.start()
            waiting = asyncio.create_task(callback.run())
            other = await asyncio.create_subprocess_exec(
                *AS_NOBODY,
                "/usr/bin/python3",
                "-c",
                CALLBACK_AS_ANOTHER_USER,
                str(port),
                stdout=subprocess.PIPE,
            )
            out, _ = await other.communicate()
            assert out == b"b''\n"
            assert login.requests == []
            assert callback.ending is None  # still awaiting the owner's
            answer = await fetch(port, get("/cb?code=1", f"127.0.0.1:{port}"))
            assert answer.startswith(b"HTTP/1.1 200")
            await waiting

    asyncio.run(main())


def test_a_callback_to_a_port_the_sandbox_did_not_name_finds_nothing_listening(
    tmp_path: Path,
) -> None:
    port, other = free_port(), free_port()
    redirect = LoopbackRedirect("127.0.0.1", port, "/cb")

    async def main() -> None:
        async with SandboxLogin(tmp_path / "login.sock") as login:
            callback = OAuthCallback(redirect, login.opener(), "auth.example.com")
            await callback.start()
            waiting = asyncio.create_task(callback.run())
            with pytest.raises(ConnectionRefusedError):
                await fetch(other, get("/cb?code=1", f"127.0.0.1:{other}"))
            assert callback.ending is None and login.requests == []
            await callback.close()
            await waiting

    asyncio.run(main())
