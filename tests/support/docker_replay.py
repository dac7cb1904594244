"""A stand-in container engine that serves recorded Docker API exchanges on a Unix socket.

For the hostile cases: the container bridge's tests point the bridge at it, send a refused
request (the bodies in tests/containers/recorded/, recorded against a real engine by
:mod:`tests.support.docker_recorder`) and assert that :attr:`ReplayEngine.requests` does
not hold it: a refused request never reached an engine. What does reach it is answered
as the real engine answered when it was recorded.

A request is matched to a recording by method and path, the API version prefix dropped
and a container's or network's Id or name read as ``{id}`` (so ``POST
/v1.43/containers/abc/start`` is answered by the recording of ``POST
/v1.41/containers/<recorded id>/start``; the container bridge sends a network named by
its name on by its Id), a HEAD as its GET; among
several, the one with the same body, else the first that is not hostile, else the first.
A request no recording matches gets 404 with a JSON message naming it, as an engine
answers an unknown route.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.support.unix_http import serving

RECORDED = Path(__file__).resolve().parent.parent / "containers" / "recorded"

_VERSION_PREFIX = re.compile(r"^/v\d+\.\d+(?=/)")
# The collections whose path segment after their name is an object's Id or name, unless
# it is one of the routes.
_BY_ID = frozenset({"containers", "networks"})
_ROUTES = frozenset({"create", "json", "prune"})


def route(method: str, target: str) -> str:
    """What a request is matched on: ``"POST /containers/{id}/start"``,
    ``"DELETE /networks/{id}"``."""
    path = _VERSION_PREFIX.sub("", urllib.parse.urlsplit(target).path)
    parts = path.split("/")
    if len(parts) > 2 and parts[1] in _BY_ID and parts[2] not in _ROUTES:
        parts[2] = "{id}"
    return f"{method} {'/'.join(parts)}"


def _body(fields: dict[str, Any]) -> bytes:
    if "json" in fields:
        return (json.dumps(fields["json"]) + "\n").encode()
    if "base64" in fields:
        return base64.b64decode(fields["base64"])
    return b""


@dataclass(frozen=True)
class Recording:
    """One recorded exchange (a file of tests/containers/recorded/)."""

    name: str
    hostile: bool
    why: str
    request: dict[str, Any]
    response: dict[str, Any]

    @property
    def route(self) -> str:
        """What it answers: see :func:`route`."""
        return route(self.request["method"], self.request["target"])

    @property
    def request_body(self) -> bytes:
        """The request's body, as sent."""
        return _body(self.request)

    def request_json(self) -> Any:
        """The request's body as JSON (a hostile case's ``create`` body, say)."""
        return self.request.get("json")


def load_recording(name: str, directory: Path = RECORDED) -> Recording:
    """The recording ``NAME.json``."""
    data = json.loads((directory / f"{name}.json").read_text())
    return Recording(data["name"], data["hostile"], data["why"], data["request"], data["response"])


def load_recordings(directory: Path = RECORDED) -> list[Recording]:
    """Every recording in ``directory``, by name."""
    return [load_recording(path.stem, directory) for path in sorted(directory.glob("*.json"))]


@dataclass(frozen=True)
class ReplayedRequest:
    """A request that reached the stand-in."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes

    @property
    def route(self) -> str:
        """See :func:`route`."""
        return route(self.method, self.target)

    def json(self) -> Any:
        """The body as JSON, or None when there is none."""
        return json.loads(self.body) if self.body else None


def choose(recordings: list[Recording], method: str, target: str, body: bytes) -> Recording | None:
    """The recording that answers this request, if any (see the module's docstring)."""
    # A HEAD is answered as the GET it stands for (the docker CLI pings with HEAD first).
    wanted = route("GET" if method == "HEAD" else method, target)
    matching = [recording for recording in recordings if recording.route == wanted]
    if not matching:
        return None
    try:
        sent = json.loads(body) if body else None
    except ValueError:
        sent = None
    same_body = [recording for recording in matching if recording.request.get("json") == sent]
    calm = [recording for recording in matching if not recording.hostile]
    return (same_body or calm or matching)[0]


@dataclass
class ReplayEngine:
    """The stand-in: :attr:`socket` to connect to, :attr:`requests` as they arrived."""

    socket: Path
    recordings: list[Recording]
    requests: list[ReplayedRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def arrived(self, request: ReplayedRequest) -> None:
        """Note a request (the handler's threads call it)."""
        with self._lock:
            self.requests.append(request)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        """The request handler class bound to this stand-in."""
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: :attr:`ReplayEngine.requests` is the log."""

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                engine.arrived(
                    ReplayedRequest(self.command, self.path, list(self.headers.items()), body)
                )
                recording = choose(engine.recordings, self.command, self.path, body)
                if recording is None:
                    status, reason = 404, "Not Found"
                    message = f"no recording answers {route(self.command, self.path)}"
                    headers = [["Content-Type", "application/json"]]
                    answer = (json.dumps({"message": message, "response": 404}) + "\n").encode()
                else:
                    status = recording.response["status"]
                    reason = recording.response["reason"]
                    headers = recording.response["headers"]
                    answer = _body(recording.response)
                self.send_response(status, reason)
                for key, value in headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                if answer and self.command != "HEAD":
                    self.wfile.write(answer)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer

        return Handler


@pytest.fixture
def replay_engine(tmp_path: Path) -> Iterator[ReplayEngine]:
    """A stand-in engine serving tests/containers/recorded/ for one test; its
    :attr:`~ReplayEngine.requests` start empty."""
    engine = ReplayEngine(tmp_path / "replay.sock", load_recordings())
    with serving(engine.socket, engine.handler()):
        yield engine
