"""The endpoint table: every row matched as a client sends it (with and without the API
version), everything else refused naming the path and the rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbridge.containers.endpoints import ENDPOINTS, Answer, Owned, route
from sandbridge.exceptions import ContainerRefused

ID = "0123456789abcdef" * 4

ALLOWED = [
    ("GET", "/_ping", "ping"),
    ("HEAD", "/_ping", "ping"),
    ("GET", "/version", "version"),
    ("GET", "/info", "info"),
    ("GET", "/images/json?all=0", "images-list"),
    ("GET", "/images/localhost/sbtest/busybox:1/json", "image-inspect"),
    ("POST", "/images/create?fromImage=busybox&tag=1", "image-pull"),
    ("POST", "/containers/create?name=web", "container-create"),
    ("GET", "/containers/json?all=1", "container-list"),
    ("GET", f"/containers/{ID}/json", "container-inspect"),
    ("POST", f"/containers/{ID}/start", "container-start"),
    ("POST", f"/containers/{ID}/wait?condition=next-exit", "container-wait"),
    ("POST", f"/containers/{ID}/stop?t=10", "container-stop"),
    ("POST", f"/containers/{ID}/kill?signal=KILL", "container-kill"),
    ("POST", f"/containers/{ID}/resize?h=24&w=80", "container-resize"),
    ("POST", f"/containers/{ID}/restart?t=1", "container-restart"),
    ("GET", f"/containers/{ID}/top?ps_args=aux", "container-top"),
    ("GET", f"/containers/{ID}/stats?stream=0", "container-stats"),
    ("GET", f"/containers/{ID}/logs?stdout=1&follow=1", "container-logs"),
    ("POST", f"/containers/{ID}/attach?stream=1&stdin=1", "container-attach"),
    ("DELETE", f"/containers/{ID}?force=1&v=1", "container-delete"),
    ("POST", f"/containers/{ID}/exec", "exec-create"),
    ("POST", f"/exec/{ID}/start", "exec-start"),
    ("POST", f"/exec/{ID}/resize?h=1&w=1", "exec-resize"),
    ("GET", f"/exec/{ID}/json", "exec-inspect"),
    ("POST", "/networks/create", "network-create"),
    ("GET", "/networks", "network-list"),
    ("GET", "/networks/testnet", "network-inspect"),
    ("DELETE", "/networks/testnet", "network-delete"),
    ("POST", "/volumes/create", "volume-create"),
    ("GET", "/volumes", "volume-list"),
    ("GET", "/volumes/data", "volume-inspect"),
    ("DELETE", "/volumes/data?force=1", "volume-delete"),
]


@pytest.mark.parametrize(("method", "target", "rule"), ALLOWED)
@pytest.mark.parametrize("version", ["", "/v1.41", "/v1.24"])
def test_each_row_is_matched_with_or_without_the_version(
    method: str, target: str, rule: str, version: str
) -> None:
    found = route(method, version + target)
    assert found.endpoint.rule == rule
    assert found.version == version


def test_every_row_is_exercised_above() -> None:
    assert {e.rule for e in ENDPOINTS} == {rule for _, _, rule in ALLOWED}


@pytest.mark.parametrize(
    ("method", "target"),
    [
        ("POST", "/build"),
        ("POST", "/images/load"),
        ("GET", "/images/busybox/get"),
        ("DELETE", "/images/busybox"),
        ("POST", "/images/busybox/push"),
        ("PUT", f"/containers/{ID}/archive?path=/"),
        ("GET", f"/containers/{ID}/archive?path=/"),
        ("POST", f"/containers/{ID}/update"),
        ("POST", f"/containers/{ID}/commit"),
        ("GET", f"/containers/{ID}/export"),
        ("POST", f"/networks/{ID}/connect"),
        ("POST", "/containers/prune"),
        ("POST", "/swarm/init"),
        ("POST", "/session"),
        ("GET", "/events"),
        ("GET", "/system/df"),
        ("POST", "/auth"),
        ("PATCH", f"/containers/{ID}/start"),
        ("GET", f"/containers/{ID}/start"),
        ("GET", "/v1.41/../../info"),
        ("GET", "/containers/%2e%2e/json"),
        ("GET", "/containers//json"),
        ("GET", "/v1.41/v1.41/info"),
        ("GET", "/libpod/info"),
    ],
)
def test_anything_else_is_refused_naming_the_path(method: str, target: str) -> None:
    with pytest.raises(ContainerRefused) as refused:
        route(method, target)
    assert (refused.value.field, refused.value.rule, refused.value.status) == (
        "path",
        "endpoint-not-allowed",
        403,
    )


@pytest.mark.parametrize(
    ("target", "field"),
    [
        ("/images/create?fromSrc=-", "query.fromSrc"),
        ("/images/create?fromImage=x&repo=y", "query.repo"),
        ("/containers/create?name=a&hostconfig=1", "query.hostconfig"),
    ],
)
def test_a_parameter_the_row_does_not_name_is_refused(target: str, field: str) -> None:
    with pytest.raises(ContainerRefused) as refused:
        route("POST", target)
    assert (refused.value.field, refused.value.rule) == (field, "parameter-not-allowed")


def test_a_malformed_query_or_target_is_a_400() -> None:
    for target in ("/_ping?a=%ff", "_ping", "/" + "a" * 3000):
        with pytest.raises(ContainerRefused) as refused:
            route("GET", target)
        assert refused.value.status in (400, 403)


def test_the_target_sent_on_names_the_full_id_in_place_of_the_clients_name() -> None:
    found = route("POST", "/v1.41/containers/web/stop?t=3")
    assert found.ref == "web"
    assert found.target(ID) == f"/v1.41/containers/{ID}/stop?t=3"
    assert found.target() == "/v1.41/containers/web/stop?t=3"


def test_the_rows_that_name_an_object_say_which_kind() -> None:
    assert route("GET", f"/exec/{ID}/json").endpoint.owned is Owned.EXEC
    assert route("DELETE", "/volumes/v").endpoint.owned is Owned.VOLUME
    assert route("POST", f"/containers/{ID}/attach").endpoint.answer is Answer.HIJACK
    assert route("GET", "/images/busybox/json").endpoint.owned is Owned.IMAGE


@given(st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD"]), st.text(max_size=80))
def test_no_target_raises_anything_but_a_refusal(method: str, tail: str) -> None:
    try:
        route(method, "/" + tail)
    except ContainerRefused as refused:
        assert refused.status in (400, 403)
