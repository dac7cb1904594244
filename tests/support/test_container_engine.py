"""The test container engine is a real Docker-compatible API on a store of its own."""

from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support import container_engine as container_engine_module
from tests.support.container_engine import (
    IMAGE,
    INSIDE,
    RUN_TIMEOUT,
    ContainerEngine,
    started_engine,
)
from tests.support.unix_http import api_request

# What root podman writes by default: an engine that is isolated leaves each as it was.
MACHINE_PODMAN_STATE = (
    "/var/lib/containers",
    "/run/containers",
    "/run/libpod",
    "/var/lib/cni",
    "/dev/shm/libpod_lock",
)


def _snapshot(path: str) -> object:
    """Whether ``path`` exists and what it holds: not its times, which a podman of the
    machine's own, if one runs meanwhile, changes without adding anything."""
    if not os.path.exists(path):
        return None
    return sorted(os.listdir(path)) if os.path.isdir(path) else os.path.getsize(path)


def _log_lines(stream: bytes) -> list[tuple[int, bytes]]:
    """The Docker API's multiplexed log stream: an 8-byte head (stream, 0, 0, 0, size)
    before each frame."""
    frames = []
    while stream:
        kind, size = struct.unpack(">BxxxI", stream[:8])
        frames.append((kind, stream[8 : 8 + size]))
        stream = stream[8 + size :]
    return frames


def _run_echo(engine: ContainerEngine, name: str, labels: dict[str, str]) -> str:
    body = {"Image": engine.image, "Cmd": ["echo", "hi"], "Labels": labels}
    created = api_request(engine.socket, "POST", f"/v1.41/containers/create?name={name}", body)
    assert created.status == 201, created.body
    identifier = created.json()["Id"]
    assert isinstance(identifier, str)
    return identifier


def test_the_socket_answers_ping(container_engine: ContainerEngine) -> None:
    answer = api_request(container_engine.socket, "GET", "/_ping")
    assert (answer.status, answer.body) == (200, b"OK")


def test_the_socket_answers_version_as_a_docker_engine(container_engine: ContainerEngine) -> None:
    answer = api_request(container_engine.socket, "GET", "/version")
    assert answer.status == 200
    version = answer.json()
    assert isinstance(version, dict)
    assert version["ApiVersion"] and version["Os"] == "linux"


def test_the_image_is_loaded_and_nothing_else(container_engine: ContainerEngine) -> None:
    answer = api_request(container_engine.socket, "GET", "/v1.41/images/json")
    assert answer.status == 200
    images = answer.json()
    assert isinstance(images, list)
    assert [image["RepoTags"] for image in images] == [[IMAGE]]


def test_a_container_runs_and_its_logs_are_read(container_engine: ContainerEngine) -> None:
    engine = container_engine
    identifier = _run_echo(engine, "echo-logs", {"sbtest": "logs"})
    started = api_request(engine.socket, "POST", f"/v1.41/containers/{identifier}/start")
    assert started.status == 204, started.body
    waited = api_request(engine.socket, "POST", f"/v1.41/containers/{identifier}/wait")
    assert waited.json() == {"StatusCode": 0, "Error": None}
    target = f"/v1.41/containers/{identifier}/logs?stdout=1&stderr=1"
    logs = api_request(engine.socket, "GET", target)
    assert _log_lines(logs.body) == [(1, b"hi\n")]
    removed = api_request(engine.socket, "DELETE", f"/v1.41/containers/{identifier}")
    assert removed.status == 204, removed.body
    assert engine.run("container", "exists", identifier).returncode == 1


def test_the_cli_sees_what_the_api_made(container_engine: ContainerEngine) -> None:
    identifier = _run_echo(container_engine, "echo-cli", {"sbtest": "cli"})
    listed = container_engine.run("ps", "-a", "--filter", "label=sbtest=cli", "--format", "{{.ID}}")
    assert listed.returncode == 0, listed.stderr
    assert identifier.startswith(listed.stdout.strip())
    assert container_engine.run("rm", identifier).returncode == 0


def test_a_container_writes_into_a_bind_of_the_tests_directory(
    container_engine: ContainerEngine, tmp_path: Path
) -> None:
    engine = container_engine
    body = {
        "Image": engine.image,
        "Cmd": ["sh", "-c", "echo written > /work/out"],
        "HostConfig": {"Binds": [f"{tmp_path}:/work"]},
    }
    created = api_request(engine.socket, "POST", "/v1.41/containers/create", body)
    identifier = created.json()["Id"]
    api_request(engine.socket, "POST", f"/v1.41/containers/{identifier}/start")
    waited = api_request(engine.socket, "POST", f"/v1.41/containers/{identifier}/wait")
    assert waited.json()["StatusCode"] == 0
    assert (tmp_path / "out").read_text() == "written\n"
    assert engine.run("rm", identifier).returncode == 0


def test_a_container_uses_a_network_and_a_volume_made_through_the_api(
    container_engine: ContainerEngine,
) -> None:
    engine = container_engine
    made = {
        "/v1.41/networks/create": {"Name": "sbtest-net"},
        "/v1.41/volumes/create": {"Name": "sbtest-volume"},
    }
    for target, named in made.items():
        assert api_request(engine.socket, "POST", target, named).status == 201, target
    body = {
        "Image": engine.image,
        "Cmd": ["sh", "-c", "echo kept > /data/file && cat /data/file"],
        "HostConfig": {"Binds": ["sbtest-volume:/data"], "NetworkMode": "sbtest-net"},
    }
    identifier = api_request(engine.socket, "POST", "/v1.41/containers/create", body).json()["Id"]
    api_request(engine.socket, "POST", f"/v1.41/containers/{identifier}/start")
    api_request(engine.socket, "POST", f"/v1.41/containers/{identifier}/wait")
    logs = api_request(engine.socket, "GET", f"/v1.41/containers/{identifier}/logs?stdout=1")
    assert _log_lines(logs.body) == [(1, b"kept\n")]
    for target in (
        f"/v1.41/containers/{identifier}",
        "/v1.41/volumes/sbtest-volume",
        "/v1.41/networks/sbtest-net",
    ):
        assert api_request(engine.socket, "DELETE", target).status == 204, target


def test_the_cli_runs_a_container_to_its_end(container_engine: ContainerEngine) -> None:
    ran = container_engine.run("run", "--rm", IMAGE, "echo", "hi")
    assert (ran.returncode, ran.stdout) == (0, "hi\n"), ran.stderr


def test_a_label_filter_lists_only_the_labelled(container_engine: ContainerEngine) -> None:
    engine = container_engine
    mine = _run_echo(engine, "labelled", {"sbtest.session": "one"})
    other = _run_echo(engine, "other", {"sbtest.session": "two"})
    query = urllib.parse.quote(json.dumps({"label": ["sbtest.session=one"]}))
    listed = api_request(engine.socket, "GET", f"/v1.41/containers/json?all=1&filters={query}")
    assert [container["Id"] for container in listed.json()] == [mine]
    assert engine.run("rm", mine, other).returncode == 0


def test_a_second_engine_has_its_own_store_and_the_machines_is_untouched(
    container_engine: ContainerEngine, tmp_path: Path
) -> None:
    before = {path: _snapshot(path) for path in MACHINE_PODMAN_STATE}
    first = _run_echo(container_engine, "first-engine", {"sbtest": "first"})
    with started_engine(tmp_path / "second") as second:
        info = second.run("info", "--format", "{{.Store.GraphRoot}} {{.Store.RunRoot}}")
        assert info.stdout.split() == [f"{INSIDE}/storage", f"{INSIDE}/run"]
        assert (tmp_path / "second" / "storage" / "vfs-images").is_dir()
        listed = second.run("ps", "-a", "--format", "{{.ID}}")
        assert (listed.returncode, listed.stdout) == (0, "")
        ran = _run_echo(second, "second-engine", {"sbtest": "second"})
        started = api_request(second.socket, "POST", f"/v1.41/containers/{ran}/start")
        assert started.status == 204, started.body
        assert container_engine.run("container", "exists", ran).returncode == 1
    assert container_engine.run("container", "exists", first).returncode == 0
    assert {path: _snapshot(path) for path in MACHINE_PODMAN_STATE} == before
    assert container_engine.run("rm", first).returncode == 0
    assert not (tmp_path / "second" / "storage").exists()


@pytest.mark.parametrize("place", ["/var/tmp", "/etc", "/sys/fs/cgroup"])
def test_the_machines_files_are_read_only_to_the_engine(
    container_engine: ContainerEngine, place: str
) -> None:
    probe = f"{place}/sbtest-engine-probe"
    enter = ["nsenter", f"--target={container_engine.init_pid}", "--mount", "--"]
    written = subprocess.run(
        [*enter, "mkdir", probe], capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
    )
    if written.returncode == 0:
        os.rmdir(probe)
    assert written.returncode != 0 and "Read-only file system" in written.stderr


def test_an_engine_that_cannot_start_fails_with_podmans_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = container_engine_module._STORAGE_CONF
    broken = good.replace('driver = "vfs"', 'driver = "no-such-driver"')
    assert broken != good
    monkeypatch.setattr(container_engine_module, "_STORAGE_CONF", broken)
    refused = pytest.raises(pytest.fail.Exception, match=r"(?s)did not start.*no-such-driver")
    with refused, started_engine(tmp_path / "broken"):
        pass


# The engine of a process that is killed: its first process's pid, then it waits.
_KILLED_OWNER = """
import sys
from pathlib import Path
from tests.support.container_engine import started_engine
with started_engine(Path(sys.argv[1])) as engine:
    print(engine.init_pid, flush=True)
    sys.stdin.read()
"""


def test_an_engine_ends_with_the_process_that_started_it(tmp_path: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", _KILLED_OWNER, str(tmp_path / "orphan")],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert owner.stdout is not None
    init_pid = int(owner.stdout.readline())
    gone = os.pidfd_open(init_pid)
    try:
        owner.kill()
        owner.wait()
        ready, _, _ = select.select([gone], [], [], RUN_TIMEOUT)
        assert ready, f"the engine's first process {init_pid} outlived its owner"
    finally:
        os.close(gone)
