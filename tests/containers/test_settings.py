"""The bridge's settings as the owner writes them: images, network, engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbridge.containers import settings
from sandbridge.containers.settings import NetworkMode
from sandbridge.exceptions import PolicyError


def test_images_are_normalised_as_the_engine_names_them() -> None:
    assert settings.parse_images(["busybox", "docker.io/library/alpine:3.20, localhost/a/b:1"]) == {
        "busybox:latest",
        "alpine:3.20",
        "localhost/a/b:1",
    }
    assert settings.normalise_image("localhost:5000/x") == "localhost:5000/x:latest"


@pytest.mark.parametrize("value", ["*", "all", "BusyBox", "a b", "", "x:" + "t" * 200])
def test_a_value_that_is_not_an_image_is_refused_naming_it(value: str) -> None:
    with pytest.raises(PolicyError, match="--containers-image"):
        settings.parse_images([value])


def test_network_and_engine_values() -> None:
    assert settings.parse_network("engine") is NetworkMode.ENGINE
    with pytest.raises(PolicyError, match="none or engine"):
        settings.parse_network("host")
    assert settings.parse_engine("unix:///run/x.sock") == Path("/run/x.sock")
    for value in ("tcp://127.0.0.1:2375", "unix://relative", "/run/x.sock"):
        with pytest.raises(PolicyError, match="unix:///PATH"):
            settings.parse_engine(value)


def test_the_default_engine_is_the_first_socket_that_exists(tmp_path: Path) -> None:
    mine = tmp_path / "podman" / "podman.sock"
    environ = {"DOCKER_HOST": "tcp://x:1", "XDG_RUNTIME_DIR": str(tmp_path)}
    candidates = settings.engine_candidates(environ)
    assert candidates[-1] == mine
    environ["DOCKER_HOST"] = f"unix://{tmp_path}/docker.sock"
    assert settings.engine_candidates(environ)[0] == tmp_path / "docker.sock"
    (tmp_path / "docker.sock").touch()
    assert settings.default_engine(environ) == tmp_path / "docker.sock"


def test_no_engine_found_is_refused_naming_where_it_looked(tmp_path: Path) -> None:
    environ = {"DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    with pytest.raises(PolicyError, match=f"no container engine socket found .tried {tmp_path}"):
        settings.default_engine(environ, system=())
