"""``sandbridge run --publish PORT[:/base]``: register a sandbox port once its app listens.

Runs in the sandbox entry beside the command. It tries to connect to ``127.0.0.1:PORT``
until something accepts (the app is listening), then registers the port exactly like
``ags-webview-url PORT /base`` does; the host prints the URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from sandbridge import log
from sandbridge.protocol.contract import DEFAULT_RELAY_SOCKET, RELAY_SOCKET_ENV
from sandbridge.relay.url_helper import register

# How often to look for the app: fast enough to feel immediate, cheap while it builds.
POLL_INTERVAL = 0.1
# A dev server may take minutes to compile before it listens; after an hour, give up.
PUBLISH_DEADLINE = 3600.0


def parse_publish(value: str) -> tuple[int, str]:
    """Parse ``PORT`` or ``PORT:/base``; raise ValueError naming the value."""
    port_text, colon, base = value.partition(":")
    digits = len(port_text) <= 5 and port_text.isascii() and port_text.isdigit()
    if not digits or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"--publish {value!r}: port must be 1..65535")
    if colon and not base.startswith("/"):
        raise ValueError(f"--publish {value!r}: the base path must start with '/'")
    return int(port_text), base or "/"


async def _listening(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def publish(port: int, base_path: str) -> None:
    """Wait until ``port`` listens (bounded), then register it with the host."""
    try:
        async with asyncio.timeout(PUBLISH_DEADLINE):
            while not await _listening(port):
                await asyncio.sleep(POLL_INTERVAL)
    except TimeoutError:
        log.warning("publish.gave_up", port=port, after_seconds=PUBLISH_DEADLINE)
        return
    socket_path = os.environ.get(RELAY_SOCKET_ENV, DEFAULT_RELAY_SOCKET)
    try:
        answer = await asyncio.to_thread(register, port, base_path, socket_path)
    except (OSError, ValueError) as exc:
        log.warning("publish.failed", port=port, reason=str(exc))
        return
    if answer.get("ok") is not True:
        log.warning("publish.refused", port=port, reason=str(answer.get("error")))
