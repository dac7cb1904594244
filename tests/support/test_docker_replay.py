"""The replay stand-in answers as the recorded engine did and lists what reached it."""

from __future__ import annotations

import pytest

from tests.support.docker_replay import (
    RECORDED,
    ReplayEngine,
    load_recording,
    load_recordings,
    route,
)
from tests.support.unix_http import UnixHTTPConnection, api_request


@pytest.mark.parametrize(
    ("method", "target", "expected"),
    [
        ("GET", "/_ping", "GET /_ping"),
        ("GET", "/v1.41/images/json", "GET /images/json"),
        ("POST", "/v1.43/containers/create?name=x", "POST /containers/create"),
        ("POST", "/containers/abc123/start", "POST /containers/{id}/start"),
        ("DELETE", "/v1.41/containers/my-name?force=1", "DELETE /containers/{id}"),
        ("GET", "/v1.41/containers/json?all=1", "GET /containers/json"),
        ("POST", "/v1.41/containers/prune", "POST /containers/prune"),
        ("DELETE", "/v1.41/networks/sbtest-recorded", "DELETE /networks/{id}"),
        ("DELETE", "/networks/b4f808b8d610", "DELETE /networks/{id}"),
        ("POST", "/v1.41/networks/create", "POST /networks/create"),
        ("GET", "/v1.41/networks", "GET /networks"),
    ],
)
def test_route_drops_the_version_and_reads_a_container_or_network_as_id(
    method: str, target: str, expected: str
) -> None:
    assert route(method, target) == expected


def test_every_recording_is_named_after_its_file_and_says_why() -> None:
    recordings = load_recordings()
    assert len(recordings) == len(list(RECORDED.glob("*.json")))
    for recording in recordings:
        assert recording.why, recording.name
        assert recording.hostile == recording.name.startswith(("create_", "other_session_"))


def test_the_hostile_create_bodies_each_add_one_thing_to_the_ordinary_one() -> None:
    ordinary = load_recording("container_create").request_json()
    for recording in load_recordings():
        if recording.name.startswith("create_") and recording.name != "create_image_not_listed":
            body = recording.request_json()
            assert body["Image"] == ordinary["Image"]
            assert len(body["HostConfig"]) == 1, recording.name


def test_ping_is_answered_as_recorded(replay_engine: ReplayEngine) -> None:
    answer = api_request(replay_engine.socket, "GET", "/_ping")
    assert (answer.status, answer.body) == (200, b"OK")


def test_a_head_is_answered_as_its_get_without_the_body(replay_engine: ReplayEngine) -> None:
    answer = api_request(replay_engine.socket, "HEAD", "/_ping")
    assert (answer.status, answer.body) == (200, b"")
    assert answer.headers["Content-Length"] == "2"


def test_a_container_made_through_it_is_started_by_the_recorded_id(
    replay_engine: ReplayEngine,
) -> None:
    body = load_recording("container_create").request_json()
    created = api_request(replay_engine.socket, "POST", "/v1.43/containers/create", body)
    assert created.status == 201
    identifier = created.json()["Id"]
    assert identifier == load_recording("container_create").response["json"]["Id"]
    started = api_request(replay_engine.socket, "POST", f"/v1.43/containers/{identifier}/start")
    assert started.status == 204


def test_a_hostile_body_is_answered_as_the_engine_answered_it(
    replay_engine: ReplayEngine,
) -> None:
    privileged = load_recording("create_privileged")
    answer = api_request(
        replay_engine.socket, "POST", privileged.request["target"], privileged.request_json()
    )
    assert answer.json() == privileged.response["json"]


def test_an_unrecorded_route_is_a_404_naming_it(replay_engine: ReplayEngine) -> None:
    answer = api_request(replay_engine.socket, "POST", "/v1.41/secrets/create", {"Name": "s"})
    assert answer.status == 404
    assert answer.json()["message"] == "no recording answers POST /secrets/create"


def test_every_request_that_reached_it_is_listed_in_order(replay_engine: ReplayEngine) -> None:
    assert replay_engine.requests == []
    api_request(replay_engine.socket, "GET", "/_ping")
    api_request(replay_engine.socket, "POST", "/v1.41/containers/create", {"Image": "x"})
    assert [request.route for request in replay_engine.requests] == [
        "GET /_ping",
        "POST /containers/create",
    ]
    assert replay_engine.requests[1].json() == {"Image": "x"}


def test_a_kept_alive_connection_is_answered_request_after_request(
    replay_engine: ReplayEngine,
) -> None:
    connection = UnixHTTPConnection(replay_engine.socket)
    try:
        for _ in range(2):
            connection.request("GET", "/_ping")
            response = connection.getresponse()
            assert (response.status, response.read()) == (200, b"OK")
    finally:
        connection.close()
    assert len(replay_engine.requests) == 2
