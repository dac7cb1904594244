"""The sandbox's spec: where the project's policy directory is visible inside, so that
the backends show the policy files alone at each place (sandbox/spec.py)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from sandbridge.sandbox.mounts import Mount
from sandbridge.sandbox.spec import SandboxSpec


def spec(workdir: str, policy_dir: str, mounts: list[Mount] | None = None) -> SandboxSpec:
    return SandboxSpec(
        command=["true"],
        workdir=Path(workdir),
        runtime_dir=Path("/tmp/ags-webview-relay-1"),
        home=Path("/tmp/home"),
        mounts=mounts or [],
        policy_dir=Path(policy_dir),
        policy_files=("allow", "config"),
    )


@pytest.mark.parametrize(
    ("workdir", "policy_dir", "mounts", "views"),
    [
        # under /tmp (a private tmpfs inside): only where the workdir brings it back
        ("/tmp/p", "/tmp/p/.sandbridge", [], ["/tmp/p/.sandbridge"]),
        # elsewhere the read-only host root shows it too, at the same path
        ("/srv/p/sub", "/srv/p/.sandbridge", [], ["/srv/p/.sandbridge"]),
        # a bind of a parent to another place shows it there as well
        (
            "/tmp/w/p",
            "/tmp/w/p/.sandbridge",
            [Mount(Path("/tmp/w"), Path("/data"), writable=False)],
            ["/data/p/.sandbridge", "/tmp/w/p/.sandbridge"],
        ),
        ("/tmp/w", "/tmp/p/.sandbridge", [], []),
    ],
)
def test_the_policy_directory_is_replaced_wherever_it_is_visible(
    workdir: str, policy_dir: str, mounts: list[Mount], views: list[str]
) -> None:
    assert spec(workdir, policy_dir, mounts).policy_views() == [Path(v) for v in views]


def test_the_backends_mount_the_policy_view_after_the_protected_paths() -> None:
    from sandbridge.sandbox import bwrap, unshare

    view = spec("/tmp/p", "/tmp/p/.sandbridge")
    argv = bwrap.options(view)
    at = argv.index("--tmpfs", argv.index("/tmp/p"))  # after the workdir's bind
    assert argv[at : at + 11] == [
        "--tmpfs",
        "/tmp/p/.sandbridge",
        "--ro-bind",
        "/tmp/p/.sandbridge/allow",
        "/tmp/p/.sandbridge/allow",
        "--ro-bind",
        "/tmp/p/.sandbridge/config",
        "/tmp/p/.sandbridge/config",
        "--remount-ro",
        "/tmp/p/.sandbridge",
        "--bind",
    ]
    assert json.loads(unshare.init_config(view))["policy"] == {
        "dir": "/tmp/p/.sandbridge",
        "files": ["allow", "config"],
        "views": ["/tmp/p/.sandbridge"],
        "other_views": [],
    }


def test_without_a_policy_directory_no_view_is_mounted() -> None:
    import dataclasses

    from sandbridge.sandbox import bwrap

    none = dataclasses.replace(spec("/tmp/p", "/tmp/p/.sandbridge"), policy_dir=None)
    assert none.policy_views() == []
    assert "--remount-ro" not in bwrap.options(none)


@pytest.mark.parametrize("backend", ["bwrap", "unshare"])
def test_with_a_setup_fd_no_value_and_no_mounted_path_is_on_the_command_line(
    backend: str,
) -> None:
    """Every local user reads /proc/PID/cmdline: the environment's values and the paths
    the backend mounts (the workdir, the other projects the owner runs) travel on the
    descriptor, whole, and the command line names the descriptor alone."""
    import dataclasses

    from sandbridge.sandbox import bwrap, unshare
    from sandbridge.sandbox.spec import setup_file

    value = "value-only-on-the-descriptor"
    plain = dataclasses.replace(
        spec("/tmp/p", "/tmp/p/.sandbridge"),
        env={"TOKEN": value},
        other_projects=(Path("/srv/other-project/.sandbridge"),),
    )
    module = bwrap if backend == "bwrap" else unshare
    payload = module.setup_payload(plain)
    fd = setup_file(payload)
    try:
        with_fd = dataclasses.replace(plain, setup_fd=fd)
        argv = module.argv(with_fd)
        assert os.read(fd, len(payload) + 1) == payload  # read from its start
    finally:
        os.close(fd)
    for secret in (value, "/srv/other-project", "/tmp/p"):
        assert secret not in " ".join(argv)
        assert secret.encode() in payload
    if backend == "bwrap":
        assert argv[1:4] == ["--args", str(fd), "--"]
        assert payload.split(b"\0")[:-1] == [w.encode() for w in bwrap.options(plain)]
    else:
        assert argv[-2:] == ["--fd", str(fd)]
        assert json.loads(payload) == json.loads(unshare.init_config(plain))
        assert json.loads(payload)["env"]["TOKEN"] == value


def test_of_other_projects_views_one_inside_another_the_outermost_alone_is_laid() -> None:
    """A view over a directory hides what lies inside it: an inner one could not be
    made. A sibling whose name only starts like another's is not inside it."""
    nested = dataclasses.replace(
        spec("/tmp/p", "/tmp/p/.sandbridge"),
        other_projects=(
            Path("/srv/a/.sandbridge/kept/.sandbridge"),
            Path("/srv/a/.sandbridge"),
            Path("/srv/a/.sandbridge-old/.sandbridge"),
            Path("/srv/b/.sandbridge"),
        ),
    )
    assert nested.other_policy_views() == [
        Path("/srv/a/.sandbridge"),
        Path("/srv/a/.sandbridge-old/.sandbridge"),
        Path("/srv/b/.sandbridge"),
    ]


def test_the_directories_above_a_view_in_a_writable_bind_are_pinned_right_after_it() -> None:
    """``mv deep deep-moved`` would move a known project out from under its view: each
    directory between the top of the writable bind holding a view and the view is bound
    onto itself right after that bind, shallowest first; under a read-only bind nothing
    can be renamed, so nothing is pinned there."""
    tree = SandboxSpec(
        command=["true"],
        workdir=Path("/tmp/code"),
        runtime_dir=Path("/tmp/ags-webview-relay-1"),
        home=Path("/tmp/home"),
        mounts=[
            Mount(Path("/srv/data"), Path("/data"), writable=True),
            Mount(Path("/srv/ro"), Path("/ro"), writable=False),
        ],
        other_projects=(
            Path("/tmp/code/deep/b/.sandbridge"),
            Path("/srv/data/x/.sandbridge"),
            Path("/srv/ro/y/z/.sandbridge"),
        ),
    )
    pin = [
        Mount(Path("/tmp/code/deep"), Path("/tmp/code/deep"), writable=True),
        Mount(Path("/tmp/code/deep/b"), Path("/tmp/code/deep/b"), writable=True),
    ]
    assert tree.bind_sequence() == [
        Mount(Path("/tmp/code"), Path("/tmp/code"), writable=True),
        *pin,
        Mount(Path("/srv/data"), Path("/data"), writable=True),
        Mount(Path("/srv/data/x"), Path("/data/x"), writable=True),
        Mount(Path("/srv/ro"), Path("/ro"), writable=False),
    ]


def test_the_other_views_a_spec_gives_are_its_own_each_time() -> None:
    """Worked out once per spec, they are handed out as a new list each time: a caller
    changing its list changes no other's."""
    two = dataclasses.replace(
        spec("/tmp/p", "/tmp/p/.sandbridge"),
        other_projects=(Path("/srv/a/.sandbridge"), Path("/srv/b/.sandbridge")),
    )
    views = two.other_policy_views()
    views.clear()
    assert two.other_policy_views() == [Path("/srv/a/.sandbridge"), Path("/srv/b/.sandbridge")]
    one = dataclasses.replace(two, other_projects=(Path("/srv/b/.sandbridge"),))
    assert one.other_policy_views() == [Path("/srv/b/.sandbridge")]
