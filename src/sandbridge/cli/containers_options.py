"""``--containers`` and its settings on ``run`` and ``host`` (docs/containers.md).

The owner's config keys ``containers = on``, ``containers_image = NAME[:TAG]``
(repeatable), ``containers_engine = unix:///PATH`` and ``containers_network = none|engine``
(``~/.config/sandbridge/config``) go through the same parsers (containers/settings.py);
a flag wins over its key. The project's ``.sandbridge/`` never turns the bridge on. A
session with the bridge is served by its own process, never the daemon: the daemon holds
no engine socket of the owner's shell, and the session's containers are removed when that
process's session ends (the run builder and ``_serve_here`` leave such a run to it).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from sandbridge.exceptions import SandbridgeError
from sandbridge.places import known_projects
from sandbridge.project.owner_config import read_owner_config
from sandbridge.protocol.contract import CONTAINERS_SOCKET, SANDBOX_CONTAINERS_SOCKET
from sandbridge.sandbox.mounts import Mount

# The bridge's settings and binds are imported when it is on: a session without it reads
# its flags and config key alone.
if TYPE_CHECKING:
    from sandbridge.containers.settings import ContainerSettings

DOCKER_HOST = "DOCKER_HOST"


def add_options(parser: argparse.ArgumentParser) -> None:
    """The flags, on ``run`` and ``host``."""
    parser.add_argument(
        "--containers",
        action="store_true",
        default=None,
        help="give the sandbox a DOCKER_HOST that forwards to your container engine what "
        "the policy allows (listed images, no privilege, binds in the workdir); off by default",
    )
    parser.add_argument(
        "--containers-image",
        action="append",
        default=[],
        metavar="NAME[:TAG]",
        help="an image the sandbox may run (repeatable; none by default)",
    )
    parser.add_argument(
        "--containers-engine",
        metavar="unix:///PATH",
        help="the engine's API socket (default: $DOCKER_HOST, podman's, then Docker's)",
    )
    parser.add_argument(
        "--containers-network",
        metavar="none|engine",
        help="the containers' network: none (default) or the engine's own",
    )
    parser.add_argument(
        "--containers-keep",
        action="store_true",
        help="keep the session's containers, networks and volumes when it ends",
    )


def _source(args: argparse.Namespace) -> str | None:
    """Where the bridge was turned on (the flag, or the owner's config line), else None."""
    if args.containers:
        return "--containers"
    switch = read_owner_config(os.environ).containers
    return switch.source if switch is not None and switch.value else None


def is_on(args: argparse.Namespace) -> bool:
    """Whether the session has the bridge (the flag, or the owner's config)."""
    return _source(args) is not None


def settings_of(args: argparse.Namespace) -> ContainerSettings | None:
    """The session's settings (None: the bridge is off); refuses a malformed value, a
    setting without the bridge, no image, or no engine found."""
    source = _source(args)
    given = args.containers_image or args.containers_engine or args.containers_network
    if source is None:
        if given or args.containers_keep:
            raise SandbridgeError(
                "--containers-image, --containers-engine, --containers-network and "
                "--containers-keep need --containers (or containers = on in your config)"
            )
        return None
    from sandbridge.containers.settings import (
        ContainerSettings,
        NetworkMode,
        default_engine,
        parse_engine,
        parse_images,
        parse_network,
    )

    owner = read_owner_config(os.environ)
    if args.containers_image:
        images = parse_images(args.containers_image)
    else:
        images = frozenset().union(
            *(parse_images([s.value], s.source) for s in owner.containers_image)
        )
    if not images:
        raise SandbridgeError(
            f"{source}: no image listed; name each image the sandbox may run with "
            "--containers-image NAME[:TAG] (or containers_image = ... in your config)"
        )
    if args.containers_engine is not None:
        engine = parse_engine(args.containers_engine)
    elif owner.containers_engine is not None:
        engine = parse_engine(owner.containers_engine.value, owner.containers_engine.source)
    else:
        engine = default_engine(os.environ)
    network = NetworkMode.NONE
    if args.containers_network is not None:
        network = parse_network(args.containers_network)
    elif owner.containers_network is not None:
        setting = owner.containers_network
        network = parse_network(setting.value, setting.source)
    return ContainerSettings(engine, images, network, args.containers_keep, source)


def with_shields(
    settings: ContainerSettings | None, protected: Iterable[Mount], policy_dir: Path | None
) -> ContainerSettings | None:
    """The settings with what the sandbox's view keeps read-only (``protected``: the
    session's protected-path mounts) and hides (the project's ``policy_dir`` and every
    remembered project's), for the containers' binds."""
    if settings is None:
        return None
    from sandbridge.containers.binds import Protected

    hidden = [path for path in (policy_dir, *known_projects.policy_dirs()) if path is not None]
    return dataclasses.replace(
        settings,
        protected=tuple(Protected(m.source, m.writable) for m in protected),
        hidden=tuple(hidden),
    )


def sandbox_env(args: argparse.Namespace) -> dict[str, str]:
    """The sandbox's ``DOCKER_HOST`` when the bridge is on (its own socket)."""
    return {DOCKER_HOST: f"unix://{SANDBOX_CONTAINERS_SOCKET}"} if is_on(args) else {}


def policy_lines(args: argparse.Namespace) -> list[str]:
    """What ``--print-policy`` says of the bridge."""
    settings = settings_of(args)
    if settings is None:
        return [
            "containers: off (--containers --containers-image NAME, or containers = on in "
            "your config, turns it on)"
        ]
    keep = "kept when the session ends" if settings.keep else "removed when the session ends"
    return [
        f"containers: on at {SANDBOX_CONTAINERS_SOCKET} ({settings.source}): engine "
        f"{settings.engine}; images {', '.join(sorted(settings.images))}; network "
        f"{settings.network.value}; containers {keep}; each request logged"
    ]


def host_lines(args: argparse.Namespace, runtime_dir: Path) -> list[str]:
    """What ``sandbridge host`` says of the bridge."""
    if not is_on(args):
        return []
    return [
        f"sandbridge: container engine on {runtime_dir / CONTAINERS_SOCKET}; inside, set "
        f"{DOCKER_HOST}=unix://{SANDBOX_CONTAINERS_SOCKET}"
    ]
