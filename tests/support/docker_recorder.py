"""Record the Docker API's exchanges with a real engine, as JSON, for the replay stand-in.

:class:`RecordingProxy` listens on a Unix socket, forwards each request to the real engine
and writes the pair to ``NAME.json``: the name is the request's ``X-Sbtest-Recording``
header (which is not forwarded), else the request's order and line. Whole bodies are read,
so streaming endpoints (``attach``, ``events``, ``logs?follow=1``) are not for it.

:func:`record_scenario` drives :data:`SCENARIO` (the exchanges the container bridge's
tests replay, hostile request bodies among them) through the proxy into a directory;
``python -m tests.support.docker_recorder DIRECTORY`` does so against a fresh test engine
(tests/containers/recorded/README.md). Paths of the engine's directory are written as
:data:`ENGINE_PLACEHOLDER`, so a recording holds no path of the machine it was made on.
"""

from __future__ import annotations

import base64
import json
import sys
import tempfile
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.support.container_engine import IMAGE, INSIDE, ContainerEngine, started_engine
from tests.support.unix_http import UnixHTTPConnection, api_request, serving

NAME_HEADER = "X-Sbtest-Recording"
# What the engine's directory is written as in a recording: where the engine itself sees
# it (so its own paths, under it already, and the bind of its socket read alike).
ENGINE_PLACEHOLDER = INSIDE
# The label a session's containers carry (the bridge's own name for it may differ: the
# replay matches requests by method and path, never by label).
SESSION_LABEL = "sandbridge.session"
# Hop-by-hop and length headers: the replay sets its own.
_NOT_RECORDED = frozenset({"connection", "content-length", "transfer-encoding", "date"})


def _body_fields(data: bytes, content_type: str) -> dict[str, Any]:
    """A body as the recording keeps it: ``json`` when it is JSON, else ``base64``."""
    if not data:
        return {}
    if "json" in content_type:
        try:
            return {"json": json.loads(data)}
        except ValueError:
            pass
    return {"base64": base64.b64encode(data).decode()}


@dataclass
class RecordingProxy:
    """Forward each request on ``listen`` to the engine at ``engine``; record each pair."""

    engine: Path
    listen: Path
    directory: Path
    scrub: str
    written: list[Path] = field(default_factory=list)

    def write(self, name: str, exchange: dict[str, Any]) -> None:
        """Write one exchange as ``NAME.json``, the engine's directory scrubbed."""
        text = json.dumps(exchange, indent=2, sort_keys=True) + "\n"
        text = text.replace(self.scrub, ENGINE_PLACEHOLDER)
        path = self.directory / f"{name}.json"
        path.write_text(text)
        self.written.append(path)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        """The request handler class bound to this proxy."""
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: the recordings are the log."""

            def _exchange(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                name = self.headers.get(NAME_HEADER) or (
                    f"{len(proxy.written):02d}-{self.command}-"
                    + urllib.parse.quote(self.path, safe="")
                )
                headers = [
                    (key, value)
                    for key, value in self.headers.items()
                    if key.lower() not in _NOT_RECORDED and key != NAME_HEADER
                ]
                upstream = UnixHTTPConnection(proxy.engine)
                try:
                    upstream.request(
                        self.command, self.path, body=body or None, headers=dict(headers)
                    )
                    response = upstream.getresponse()
                    answer = response.read()
                    answer_headers = [
                        (key, value)
                        for key, value in response.getheaders()
                        if key.lower() not in _NOT_RECORDED
                    ]
                    status, reason = response.status, response.reason
                finally:
                    upstream.close()
                request_type = self.headers.get("Content-Type", "")
                response_type = response.getheader("Content-Type", "")
                proxy.write(
                    name,
                    {
                        "name": name,
                        "request": {
                            "method": self.command,
                            "target": self.path,
                            "headers": headers,
                            **_body_fields(body, request_type),
                        },
                        "response": {
                            "status": status,
                            "reason": reason,
                            "headers": answer_headers,
                            **_body_fields(answer, response_type),
                        },
                    },
                )
                self.send_response(status, reason)
                for key, value in answer_headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                if answer and self.command != "HEAD":
                    self.wfile.write(answer)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _exchange

        return Handler


@contextmanager
def recording(engine: Path, listen: Path, directory: Path, scrub: str) -> Iterator[RecordingProxy]:
    """Serve a :class:`RecordingProxy` on ``listen`` for the block."""
    proxy = RecordingProxy(engine, listen, directory, scrub)
    with serving(listen, proxy.handler()):
        yield proxy


def _create(
    host: dict[str, Any] | None = None, image: str = IMAGE, labels: str = "recorded"
) -> dict[str, Any]:
    return {
        "Image": image,
        "Cmd": ["echo", "hi"],
        "Labels": {SESSION_LABEL: labels},
        "HostConfig": host or {},
    }


@dataclass(frozen=True)
class Step:
    """One recorded exchange: its name, request, whether it is hostile (a request the
    bridge must refuse) and what it says."""

    name: str
    method: str
    target: str
    body: dict[str, Any] | None
    hostile: bool
    why: str


def scenario(engine_socket: str) -> list[Step]:
    """The exchanges recorded, in order (``{id}`` is the last created container's Id)."""
    label = urllib.parse.quote(json.dumps({"label": [f"{SESSION_LABEL}=recorded"]}))
    v = "/v1.41"
    hostile: list[tuple[str, dict[str, Any], str]] = [
        ("create_privileged", {"Privileged": True}, "a privileged container"),
        ("create_bind_root", {"Binds": ["/:/host"]}, "a bind of the host's /"),
        (
            "create_mount_root",
            {"Mounts": [{"Type": "bind", "Source": "/", "Target": "/host"}]},
            "a bind of the host's / in the Mounts form",
        ),
        ("create_pid_host", {"PidMode": "host"}, "the host's PID namespace (--pid host)"),
        (
            "create_bind_engine_socket",
            {"Binds": [f"{engine_socket}:/var/run/docker.sock"]},
            "a bind of the engine's own socket",
        ),
        ("create_network_host", {"NetworkMode": "host"}, "the host's network namespace"),
        (
            "create_devices",
            {
                "Devices": [
                    {
                        "PathOnHost": "/dev/kmsg",
                        "PathInContainer": "/dev/kmsg",
                        "CgroupPermissions": "rwm",
                    }
                ]
            },
            "a host device",
        ),
        ("create_cap_add", {"CapAdd": ["SYS_ADMIN"]}, "an added capability"),
    ]
    return [
        Step("ping", "GET", "/_ping", None, False, "the engine answers"),
        Step("version", "GET", "/version", None, False, "the engine's version"),
        Step("images_list", "GET", f"{v}/images/json", None, False, "the images in store"),
        Step(
            "container_create",
            "POST",
            f"{v}/containers/create?name=sbtest-recorded",
            _create(),
            False,
            "a container of the session, from the listed image, nothing more",
        ),
        Step("container_start", "POST", f"{v}/containers/{{id}}/start", None, False, "start"),
        Step("container_wait", "POST", f"{v}/containers/{{id}}/wait", None, False, "its end"),
        Step(
            "container_logs",
            "GET",
            f"{v}/containers/{{id}}/logs?stdout=1&stderr=1",
            None,
            False,
            "its output (the multiplexed stream)",
        ),
        Step("container_inspect", "GET", f"{v}/containers/{{id}}/json", None, False, "its labels"),
        Step(
            "container_list_label",
            "GET",
            f"{v}/containers/json?all=1&filters={label}",
            None,
            False,
            "the session's containers, by label",
        ),
        Step("container_delete", "DELETE", f"{v}/containers/{{id}}", None, False, "removed"),
        Step(
            "network_create",
            "POST",
            f"{v}/networks/create",
            {"Name": "sbtest-recorded", "Labels": {SESSION_LABEL: "recorded"}},
            False,
            "a network of the session",
        ),
        Step("network_delete", "DELETE", f"{v}/networks/sbtest-recorded", None, False, "removed"),
        Step(
            "volume_create",
            "POST",
            f"{v}/volumes/create",
            {"Name": "sbtest-recorded", "Labels": {SESSION_LABEL: "recorded"}},
            False,
            "a volume of the session",
        ),
        Step("volume_delete", "DELETE", f"{v}/volumes/sbtest-recorded", None, False, "removed"),
        *(
            Step(
                name,
                "POST",
                f"{v}/containers/create?name=sbtest-{name}",
                _create(host),
                True,
                why,
            )
            for name, host, why in hostile
        ),
        Step(
            "create_image_not_listed",
            "POST",
            f"{v}/containers/create?name=sbtest-not-listed",
            _create(image="localhost/sbtest/not-listed:1"),
            True,
            "an image the policy does not list (nor the store holds: nothing is pulled)",
        ),
        Step(
            "other_session_create",
            "POST",
            f"{v}/containers/create?name=sbtest-other-session",
            _create(labels="another"),
            True,
            "a container another session made (created here to be found below)",
        ),
        Step(
            "other_session_inspect",
            "GET",
            f"{v}/containers/{{id}}/json",
            None,
            True,
            "another session's container, looked at",
        ),
        Step(
            "other_session_start",
            "POST",
            f"{v}/containers/{{id}}/start",
            None,
            True,
            "another session's container, started",
        ),
        Step(
            "other_session_delete",
            "DELETE",
            f"{v}/containers/{{id}}?force=1",
            None,
            True,
            "another session's container, removed",
        ),
    ]


def _send(listen: Path, step: Step, last_id: str) -> tuple[int, bytes]:
    """Send one step through the proxy; its status and body."""
    headers = {NAME_HEADER: step.name}
    data = None
    if step.body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(step.body).encode()
    connection = UnixHTTPConnection(listen)
    try:
        connection.request(step.method, step.target.replace("{id}", last_id), data, headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def record_scenario(engine: ContainerEngine, directory: Path) -> list[Path]:
    """Record :func:`scenario` against ``engine`` into ``directory``; every container it
    made is removed afterwards (directly, not recorded)."""
    directory.mkdir(parents=True, exist_ok=True)
    last_id = ""
    made: list[str] = []
    scrub = str(engine.directory)
    with (
        tempfile.TemporaryDirectory(prefix="sbrec-") as sockets,
        recording(engine.socket, Path(sockets) / "r.sock", directory, scrub) as proxy,
    ):
        for step in scenario(str(engine.socket)):
            status, answer = _send(proxy.listen, step, last_id)
            if step.target.split("?")[0].endswith("/containers/create") and status == 201:
                last_id = json.loads(answer)["Id"]
                made.append(last_id)
            _annotate(proxy.written[-1], step)
    for identifier in made:
        api_request(engine.socket, "DELETE", f"/v1.41/containers/{identifier}?force=1")
    return proxy.written


def _annotate(path: Path, step: Step) -> None:
    """Add what the step is to its recording."""
    exchange = json.loads(path.read_text())
    exchange["hostile"] = step.hostile
    exchange["why"] = step.why
    path.write_text(json.dumps(exchange, indent=2, sort_keys=True) + "\n")


def main(argv: list[str]) -> int:
    """``python -m tests.support.docker_recorder DIRECTORY``: record against a new engine."""
    if len(argv) != 1:
        print("usage: python -m tests.support.docker_recorder DIRECTORY", file=sys.stderr)
        return 2
    target = Path(argv[0])
    with (
        tempfile.TemporaryDirectory(prefix="sbrec-") as work,
        started_engine(Path(work) / "e") as engine,
    ):
        for path in record_scenario(engine, target):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
