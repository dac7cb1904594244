"""A session's apps served again after a restart of the daemon, from ``session.json``."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

from sandbridge.places.registry import AppRecord
from sandbridge.places.runtime_dir import RuntimeDir
from sandbridge.protocol.http.origin_policy import new_label
from sandbridge.session.host import HostSession


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def record(port: Any, host_port: Any, label: str, **fields: Any) -> AppRecord:
    return AppRecord(
        port, host_port, fields.pop("base_path", "/"), f"http://{label}.localhost:{host_port}/",
        False, **fields,
    )  # fmt: skip


def test_only_records_the_registration_server_could_have_taken_are_served_again(
    tmp_path: Path,
) -> None:
    # session.json is read back like any input: a record with a field no registration
    # has, or that repeats another app's host port or name, is left out, and the good
    # one is served at its URL.
    good_port, other_port, label = free_port(), free_port(), new_label()
    records = [
        record(4173, good_port, label),
        record(0, free_port(), new_label()),
        record(4174, free_port(), new_label(), base_path="/../x"),
        record(4175, free_port(), new_label(), process="\x1b]0;pwned\x07"),
        record(4176, "8080", new_label()),
        record(4177, good_port, new_label()),  # the good one's host port
        record(4178, other_port, label),  # the good one's name: its cookies
        record(4179, free_port(), new_label(), auto="yes"),
    ]

    async def scenario() -> None:
        runtime_dir = RuntimeDir.create(tmp_path / "runtime")
        host = HostSession(runtime_dir)
        await host.start()
        try:
            await host.restore(records)
            assert [(app.port, app.host_port, app.url) for app in host.apps] == [
                (4173, good_port, f"http://{label}.localhost:{good_port}/")
            ]
        finally:
            await host.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))
