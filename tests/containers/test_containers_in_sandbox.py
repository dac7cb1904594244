"""The container engine bridge end to end: ``sandbridge run --containers`` (both
backends) gives a real sandbox ``DOCKER_HOST``, and a real HTTP client inside (curl over
the Unix socket) creates, starts and is refused through it, in front of a stand-in engine
on the host (stand_in_engine.py) whose socket the sandbox never sees; the session's
container is removed when it ends. ``sandbridge host --containers`` serves the same socket
in a runtime dir another runtime mounts.

The sandbox's script prints one ``NAME value`` line per check, then waits on a FIFO so
that the test can read ``sandbridge status`` while the session lives."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbridge.protocol.contract import CONTAINERS_SOCKET
from tests.conftest import SANDBRIDGE, Process, run_argv
from tests.containers.bridge_thread import IMAGE, connect_to
from tests.containers.stand_in_engine import EngineThread
from tests.support.command_in_process import sandbridge

SCRIPT = """\
set -u
S="${DOCKER_HOST#unix://}"
C="curl -s --unix-socket $S -H Content-Type:application/json"
echo "HOST $DOCKER_HOST"
echo "PING $($C http://docker/_ping)"
ID=$($C -X POST -d "{\\"Image\\":\\"$IMAGE\\"}" http://docker/v1.41/containers/create |
  sed 's/.*"Id": *"\\([0-9a-f]*\\)".*/\\1/')
echo "ID $ID"
echo "START $($C -o /dev/null -w '%{http_code}' -X POST http://docker/v1.41/containers/$ID/start)"
echo "PRIVILEGED $($C -w ' %{http_code}' -X POST \\
  -d "{\\"Image\\":\\"$IMAGE\\",\\"HostConfig\\":{\\"Privileged\\":true}}" \\
  http://docker/v1.41/containers/create)"
test -e "$ENGINE"; echo "ENGINE_VISIBLE $?"
echo "CHECKS DONE"
read -r _ < "$WORK/release"
"""


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[EngineThread]:
    # Its socket lies outside the workdir: the sandbox must not see it.
    (tmp_path / "engine").mkdir()
    served = EngineThread(tmp_path / "engine" / "engine.sock")
    yield served
    served.stop()


def _status(session: str) -> list[dict[str, Any]]:
    """The owner's ``sandbridge status --json`` in this process
    (tests/support/command_in_process.py)."""
    shown = sandbridge("status", "--json", session)
    assert shown.returncode == 0, shown.stderr
    report: list[dict[str, Any]] = json.loads(shown.stdout)
    return report


def test_the_sandbox_runs_a_listed_image_and_is_refused_a_privileged_one(
    tmp_path: Path, engine: EngineThread, backend: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "script.sh").write_text(SCRIPT)
    os.mkfifo(work / "release")
    session = f"ctr-{backend}"
    env = {**os.environ, "WORK": str(work), "IMAGE": IMAGE, "ENGINE": str(engine.socket)}
    argv = run_argv(
        work, "sh", str(work / "script.sh"),
        options=(
            "--backend", backend, "--name", session, "--no-daemon", "--net", "none",
            "--containers", "--containers-engine", f"unix://{engine.socket}",
            "--containers-image", IMAGE,
            *(f"--env={name}" for name in ("WORK", "IMAGE", "ENGINE")),
        ),
    )  # fmt: skip
    process = Process(argv, env=env)
    try:
        process.wait_line("CHECKS DONE", timeout=120)
        [report] = _status(session)
    finally:
        (work / "release").write_text("go\n")
        process.popen.wait(timeout=60)
    found = {
        line.split(" ", 1)[0]: line.split(" ", 1)[1].strip() if " " in line else ""
        for line in process.lines["stdout"]
    }
    assert found["HOST"] == f"unix:///run/ags-webview-relay/{CONTAINERS_SOCKET}"
    assert found["PING"] == "OK"
    cid = found["ID"]
    assert len(cid) == 64
    assert found["START"] == "204"
    assert found["PRIVILEGED"].endswith(" 403")
    assert "(field HostConfig.Privileged, rule no-privileged)" in found["PRIVILEGED"]
    assert found["ENGINE_VISIBLE"] == "1"
    assert report["containers"]["created"] == 1
    assert report["containers"]["refused"] == 1
    paths = [f"{seen.method} {seen.path}" for seen in engine.requests]
    assert paths.count("POST /containers/create") == 1
    assert paths[-1] == f"DELETE /containers/{cid}"  # removed when the session ended


def test_host_serves_the_engine_socket_in_the_runtime_dir(
    tmp_path: Path, engine: EngineThread
) -> None:
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    project = tmp_path / "project"  # what the container mounts; the engine lies outside
    project.mkdir()
    host = Process(
        [*SANDBRIDGE, "host", "--runtime-dir", str(runtime), "--no-daemon", "--containers",
         "--containers-engine", f"unix://{engine.socket}", "--containers-image", IMAGE],
        cwd=project,
    )  # fmt: skip
    try:
        line = host.wait_line("sandbridge: container engine on", stream="stderr", timeout=60)
        assert line.endswith(f"DOCKER_HOST=unix:///run/ags-webview-relay/{CONTAINERS_SOCKET}")
        socket_path = runtime / CONTAINERS_SOCKET
        assert socket_path.stat().st_mode & 0o777 == 0o600
        # What a container's client sees through the mounted runtime dir.
        connection = connect_to(socket_path)
        connection.request("POST", "/containers/create", body=json.dumps({"Image": "alpine"}))
        answer = connection.getresponse()
        refused = json.loads(answer.read())
        connection.close()
    finally:
        host.stop()
    assert answer.status == 403
    assert "(field Image, rule image-not-listed)" in refused["message"]


def test_with_the_daemon_running_the_run_serves_its_bridge_itself(
    xdg: Path, daemon: Process, engine: EngineThread, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    argv = run_argv(
        work, "sh", "-c", 'curl -s --unix-socket "${DOCKER_HOST#unix://}" http://docker/_ping',
        options=("--net", "none", "--containers", "--containers-engine",
                 f"unix://{engine.socket}", "--containers-image", IMAGE),
    )  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "OK"
    assert "the daemon serves it" not in result.stderr
