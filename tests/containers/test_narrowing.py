"""Lists narrowed to the session's own, images to the listed, info to what says nothing
of the host."""

from __future__ import annotations

import json

import pytest

from sandbridge.containers import narrowing
from sandbridge.exceptions import ContainerRefused


def _filters(pairs: list[tuple[str, str]]) -> object:
    return json.loads(dict(pairs)["filters"])


def test_the_session_label_is_added_to_the_clients_filters_in_either_form() -> None:
    for given in ('{"label": ["a=b"]}', '{"label": {"a=b": true}}'):
        pairs = narrowing.session_list([("all", "1"), ("filters", given)], "s-x")
        assert _filters(pairs) == {"label": ["a=b", "sandbridge.session=s-x"]}
        assert ("all", "1") in pairs
    assert _filters(narrowing.session_list([], "s-x")) == {"label": ["sandbridge.session=s-x"]}


@pytest.mark.parametrize("given", ["[1]", "{", '{"label": "a=b"}', '{"label": [1]}'])
def test_malformed_filters_are_refused(given: str) -> None:
    with pytest.raises(ContainerRefused) as refused:
        narrowing.session_list([("filters", given)], "s-x")
    assert refused.value.status == 400


def test_images_are_narrowed_to_the_listed_ones() -> None:
    images = frozenset({"busybox:latest"})
    assert _filters(narrowing.listed_images([], images)) == {"reference": ["busybox:latest"]}
    kept = narrowing.listed_images([("filters", '{"reference": ["busybox"]}')], images)
    assert _filters(kept) == {"reference": ["busybox"]}
    with pytest.raises(ContainerRefused) as refused:
        narrowing.listed_images([("filters", '{"reference": ["alpine"]}')], images)
    assert refused.value.rule == "image-not-listed"


def test_info_keeps_only_the_listed_fields() -> None:
    info = {"ServerVersion": "1", "DockerRootDir": "/var/lib/docker", "Name": "laptop"}
    assert json.loads(narrowing.engine_info(json.dumps(info).encode())) == {"ServerVersion": "1"}
    assert narrowing.engine_info(b"not json") == b"{}"
