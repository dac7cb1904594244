"""The container bridge on a real Unix socket in front of the stand-in engine, both on one
event loop in a thread of their own (as a session serves the bridge), and a real HTTP
client (the standard library's, over the Unix socket) to call it as ``docker`` does."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbridge.containers.binds import BindRules, Protected
from sandbridge.containers.decision_log import DecisionLog
from sandbridge.containers.server import MAX_REQUESTS, ContainerBridge
from sandbridge.containers.settings import ContainerSettings, NetworkMode
from tests.containers.stand_in_engine import StandInEngine
from tests.support.loop_thread import LoopThread
from tests.support.unix_http import UnixHTTPConnection

IMAGE = "localhost/sbtest/busybox:1"


# A bridge answers a test's request at once; a test that waits longer has found a hang.
TIMEOUT = 10.0


def connect_to(path: Path) -> UnixHTTPConnection:
    """A client connection to the API at ``path`` (the bridge's, or the engine's), as
    ``docker`` makes one for ``DOCKER_HOST=unix://...``."""
    return UnixHTTPConnection(path, timeout=TIMEOUT)


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def message(self) -> str:
        return str(self.json()["message"])


class BridgeThread(LoopThread):
    """A bridge for session ``session`` at ``tmp/run/containers.sock`` (``tmp/run``: its
    runtime dir) before a stand-in engine at ``engine_dir/engine.sock`` (default
    ``tmp/engine``); the workdir is ``tmp/work``."""

    def __init__(
        self,
        tmp: Path,
        session: str = "s-test",
        network: NetworkMode = NetworkMode.NONE,
        keep: bool = False,
        protected: tuple[Protected, ...] = (),
        hidden: tuple[Path, ...] = (),
        max_requests: int = MAX_REQUESTS,
        engine_dir: Path | None = None,
    ) -> None:
        run = tmp / "run"
        run.mkdir(exist_ok=True)
        self.path = run / "containers.sock"
        self.workdir = (tmp / "work").resolve()
        self.workdir.mkdir(exist_ok=True)
        engine_dir = engine_dir or tmp / "engine"
        engine_dir.mkdir(exist_ok=True)
        self.engine = StandInEngine(engine_dir / "engine.sock")
        self.settings = ContainerSettings(self.engine.socket, frozenset({IMAGE}), network, keep)
        cover = tmp / "cover"
        cover.mkdir(exist_ok=True)
        binds = BindRules(self.workdir, cover, (self.engine.socket, run), protected, hidden)
        self.log_dir = tmp / "state"
        self.log_dir.mkdir(exist_ok=True)
        self.bridge = ContainerBridge(
            self.path, self.settings, session, binds, DecisionLog(self.log_dir), max_requests
        )
        super().__init__()

    async def start_servers(self) -> None:
        await self.engine.start()
        await self.bridge.start()
        self.started_with = self.engine.paths()
        self.engine.requests.clear()  # the start's own ping: each test sees its requests alone

    async def close_servers(self) -> None:
        await self.bridge.close()
        await self.engine.close()

    def call(
        self, method: str, target: str, body: object = None, raw: bytes | None = None
    ) -> Reply:
        """One request as a Docker client sends it."""
        connection = connect_to(self.path)
        try:
            data = raw if raw is not None else None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json"} if data is not None else {}
            connection.request(method, target, body=data, headers=headers)
            answer = connection.getresponse()
            return Reply(answer.status, dict(answer.getheaders()), answer.read())
        finally:
            connection.close()

    def create(self, body: dict[str, Any] | None = None, name: str = "") -> str:
        """A container of the listed image (with ``body``'s fields); its id."""
        query = f"?name={name}" if name else ""
        reply = self.call(
            "POST", f"/v1.41/containers/create{query}", {"Image": IMAGE, **(body or {})}
        )
        assert reply.status == 201, reply.body
        return str(reply.json()["Id"])

    def direct(self, method: str, target: str, body: object = None) -> Reply:
        """A request straight to the engine (the owner's own, or another session's)."""
        connection = connect_to(self.engine.socket)
        try:
            data = None if body is None else json.dumps(body).encode()
            connection.request(method, target, body=data)
            answer = connection.getresponse()
            return Reply(answer.status, dict(answer.getheaders()), answer.read())
        finally:
            connection.close()

    def raw(self, data: bytes) -> bytes:
        """Send ``data`` as is and end the sending side; what comes back until the
        bridge closes."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(self.path))
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
            return b"".join(chunks)
