"""The recorder writes a real engine's answers, and they are still the committed ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.container_engine import ContainerEngine
from tests.support.docker_recorder import ENGINE_PLACEHOLDER, record_scenario, recording
from tests.support.docker_replay import RECORDED, load_recordings
from tests.support.unix_http import api_request


@pytest.fixture(scope="module")
def fresh(container_engine: ContainerEngine, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scenario recorded once for this module's tests (a few seconds)."""
    directory = tmp_path_factory.mktemp("recorded")
    record_scenario(container_engine, directory)
    return directory


def test_the_engine_still_answers_as_recorded(fresh: Path) -> None:
    now = {r.name: (r.hostile, r.response["status"]) for r in load_recordings(fresh)}
    committed = {r.name: (r.hostile, r.response["status"]) for r in load_recordings(RECORDED)}
    assert now == committed


def test_no_recording_holds_the_engines_directory(
    container_engine: ContainerEngine, fresh: Path
) -> None:
    for path in fresh.glob("*.json"):
        assert str(container_engine.directory) not in path.read_text(), path.name
    bind = json.loads((fresh / "create_bind_engine_socket.json").read_text())
    binds = bind["request"]["json"]["HostConfig"]["Binds"]
    assert binds == [f"{ENGINE_PLACEHOLDER}/engine.sock:/var/run/docker.sock"]


def test_an_unnamed_request_is_recorded_by_its_order_and_line(
    container_engine: ContainerEngine, tmp_path: Path
) -> None:
    listen = tmp_path / "r.sock"
    out = tmp_path / "out"
    out.mkdir()
    with recording(container_engine.socket, listen, out, str(container_engine.directory)):
        answer = api_request(listen, "GET", "/_ping")
    assert (answer.status, answer.body) == (200, b"OK")
    (written,) = out.iterdir()
    assert written.name == "00-GET-%2F_ping.json"
    assert json.loads(written.read_text())["response"]["base64"] == "T0s="
