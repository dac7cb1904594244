"""The sandbox's spec: where a hidden file (the secrets file) is visible inside, so that
the backends cover it at each place (sandbox/spec.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbridge.sandbox.mounts import Mount
from sandbridge.sandbox.spec import SandboxSpec


def spec(workdir: str, hidden: str, mounts: list[Mount] | None = None) -> SandboxSpec:
    return SandboxSpec(
        command=["true"],
        workdir=Path(workdir),
        runtime_dir=Path("/tmp/ags-webview-relay-1"),
        home=Path("/tmp/home"),
        mounts=mounts or [],
        hidden_files=[Path(hidden)],
    )


@pytest.mark.parametrize(
    ("workdir", "hidden", "mounts", "targets"),
    [
        # under /tmp (a private tmpfs inside): only where the workdir brings it back
        ("/tmp/p", "/tmp/p/.sandbridge/env", [], ["/tmp/p/.sandbridge/env"]),
        # elsewhere the read-only host root shows it too, at the same path
        ("/srv/p/sub", "/srv/p/.sandbridge/env", [], ["/srv/p/.sandbridge/env"]),
        # a bind to another place shows it there as well
        (
            "/tmp/w",
            "/tmp/p/.sandbridge/env",
            [Mount(Path("/tmp/p"), Path("/data"), writable=False)],
            ["/data/.sandbridge/env"],
        ),
        ("/tmp/w", "/tmp/p/.sandbridge/env", [], []),
    ],
)
def test_a_hidden_file_is_covered_wherever_it_is_visible(
    workdir: str, hidden: str, mounts: list[Mount], targets: list[str]
) -> None:
    assert spec(workdir, hidden, mounts).hidden_targets() == [Path(t) for t in targets]


def test_the_backends_cover_each_place_after_the_binds() -> None:
    from sandbridge.sandbox import bwrap, unshare

    hidden = spec("/tmp/p", "/tmp/p/.sandbridge/env")
    argv = bwrap.argv(hidden)
    at = argv.index("/tmp/p/.sandbridge/env")
    assert argv[at - 2 : at] == ["--ro-bind", "/dev/null"]
    assert at > argv.index("/tmp/p")  # after the workdir's bind
    assert '"hidden": ["/tmp/p/.sandbridge/env"]' in unshare.init_config(hidden)


@pytest.mark.parametrize("backend", ["bwrap", "unshare"])
def test_with_an_env_fd_no_value_is_on_the_command_line(backend: str) -> None:
    import dataclasses
    import json

    from sandbridge.sandbox import bwrap, unshare
    from sandbridge.sandbox.spec import environment_file

    value = "value-only-on-the-descriptor"
    plain = dataclasses.replace(spec("/tmp/p", "/tmp/p/x"), env={"TOKEN": value})
    module = bwrap if backend == "bwrap" else unshare
    payload = module.env_payload(plain)
    fd = environment_file(payload)
    try:
        with_fd = dataclasses.replace(plain, env_fd=fd)
        argv = module.argv(with_fd)
        assert value not in " ".join(argv)
        assert os.read(fd, len(payload) + 1) == payload  # read from its start
    finally:
        os.close(fd)
    if backend == "bwrap":
        assert argv[argv.index("--args") + 1] == str(fd)
        assert b"--setenv\0TOKEN\0" + value.encode() + b"\0" in payload
    else:
        assert json.loads(payload)["TOKEN"] == value
        assert json.loads(argv[-1])["env_fd"] == fd
