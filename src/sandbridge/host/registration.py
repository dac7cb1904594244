"""The registration server on ``relay.sock``: one JSON request, one JSON answer.

Every refusal is ``{"ok":false,"error":"..."}`` naming the bad value; a client that
sends too much or nothing at all is answered (or dropped) within the read timeout, and
never blocks other registrations.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sandbridge import log
from sandbridge.exceptions import RegistrationError, WireError
from sandbridge.unix_sockets import bind_unix_socket, linger_close, read_line
from sandbridge.wire.limits import (
    MAX_PENDING_REGISTRATIONS,
    MAX_REGISTRATION_BYTES,
    REGISTRATION_READ_TIMEOUT,
)
from sandbridge.wire.registration import (
    RegisterRequest,
    encode_register_error,
    encode_register_ok,
    parse_register_request,
)

if TYPE_CHECKING:
    from sandbridge.host.app_listener import App

Register = Callable[[RegisterRequest], Awaitable["App"]]


class RegistrationServer:
    """Serves registrations on a Unix socket, calling ``register`` for each valid one."""

    def __init__(self, path: Path, register: Register) -> None:
        self.path = path
        self._register = register
        self._server: asyncio.Server | None = None
        self._pending = 0
        self._lingering = 0

    async def start(self) -> None:
        sock = bind_unix_socket(self.path)
        self._server = await asyncio.start_unix_server(self._serve, sock=sock)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._pending >= MAX_PENDING_REGISTRATIONS:
            with contextlib.suppress(OSError):
                writer.write(
                    encode_register_error(
                        f"more than {MAX_PENDING_REGISTRATIONS} registrations in progress; "
                        "try again"
                    )
                )
                if self._lingering < MAX_PENDING_REGISTRATIONS:
                    # A bounded number of refusals wait for the peer to read them; past
                    # that, a flood of connections is simply closed.
                    self._lingering += 1
                    try:
                        await linger_close(reader, writer)
                    finally:
                        self._lingering -= 1
            writer.close()
            return
        self._pending += 1
        try:
            try:
                async with asyncio.timeout(REGISTRATION_READ_TIMEOUT):
                    line, _ = await read_line(reader, MAX_REGISTRATION_BYTES)
                request = parse_register_request(line)
                app = await self._register(request)
                answer = encode_register_ok(app.host_port, app.base_path, app.url)
            except TimeoutError:
                answer = encode_register_error(
                    f"no complete request within {REGISTRATION_READ_TIMEOUT:g} s"
                )
            except (RegistrationError, WireError) as exc:
                answer = encode_register_error(str(exc))
            if answer.startswith(b'{"ok":false'):
                log.debug("registration.refused", answer=answer.decode().strip())
            writer.write(answer)
            await writer.drain()
        except OSError:
            pass
        finally:
            self._pending -= 1
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
