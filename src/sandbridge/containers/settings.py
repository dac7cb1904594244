"""What a session's container engine bridge serves (``--containers``), as pure parses.

The owner names the engine (``--containers-engine unix:///PATH``, else the first socket
of :func:`default_engine`'s list that exists), the images the sandbox may run
(``--containers-image NAME[:TAG]``, repeatable: no image is allowed by default), the
containers' network (``none``, the default, or ``engine``: the engine's own default
network) and whether the session's containers outlive it (``--containers-keep``). The
owner's config keys ``containers``, ``containers_image``, ``containers_engine`` and
``containers_network`` go through the same parsers; the project's ``.sandbridge/`` never
turns the bridge on.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sandbridge.containers.binds import Protected
from sandbridge.exceptions import PolicyError

# The Docker API's own default tag.
DEFAULT_TAG = "latest"
# Docker Hub's names: ``busybox``, ``library/busybox`` and ``docker.io/library/busybox``
# are one image, so a listed short name matches the long forms a client may send.
HUB_PREFIXES = ("docker.io/library/", "index.docker.io/library/", "docker.io/", "library/")
# An image reference as the Docker API takes it: path components of lower-case letters,
# digits and separators, an optional registry host (with a port), a tag, or a digest.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*(?::[0-9]{1,5})?/)?"
_REFERENCE = re.compile(
    rf"{_HOST}{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
    r"(?:@sha256:[0-9a-f]{64})?"
)
MAX_REFERENCE_CHARS = 255
# Where an engine's API socket usually is, after $DOCKER_HOST: rootful podman, Docker,
# then the owner's rootless podman.
SYSTEM_ENGINES = ("/run/podman/podman.sock", "/var/run/docker.sock")
ROOTLESS_PODMAN = "podman/podman.sock"
UNIX_SCHEME = "unix://"


class NetworkMode(enum.Enum):
    """``--containers-network``: what network the session's containers get."""

    # No network at all: a container sees its own loopback only (the default).
    NONE = "none"
    # The engine's default network (or one the session created): the engine's own
    # egress, outside the sandbox's egress policy (docs/containers.md).
    ENGINE = "engine"


@dataclass(frozen=True, slots=True)
class ContainerSettings:
    """A session's container engine bridge: the engine's API socket, the images allowed
    (normalised: :func:`normalise_image`), the containers' network, and whether they
    are kept when the session ends. ``source`` says where the bridge was turned on."""

    engine: Path
    images: frozenset[str]
    network: NetworkMode = NetworkMode.NONE
    keep: bool = False
    source: str = "--containers"
    # What the sandbox's view keeps read-only and hides (binds.py): each container's binds
    # keep it too. Set by the session's builder, which decides them.
    protected: tuple[Protected, ...] = ()
    hidden: tuple[Path, ...] = ()


def normalise_image(reference: str) -> str:
    """``reference`` as the bridge compares it: Docker Hub's long forms shortened, and
    ``:latest`` where no tag or digest is given."""
    name = reference
    for prefix in HUB_PREFIXES:
        if name.startswith(prefix) and "/" not in name[len(prefix) :].split(":")[0]:
            name = name[len(prefix) :]
            break
    last = name.rsplit("/", 1)[-1]
    if ":" not in last and "@" not in last:
        name += f":{DEFAULT_TAG}"
    return name


def is_reference(text: str) -> bool:
    """Whether ``text`` is an image reference (name, tag, digest) as the API takes it."""
    return len(text) <= MAX_REFERENCE_CHARS and _REFERENCE.fullmatch(text) is not None


def parse_images(values: Iterable[str], source: str = "--containers-image") -> frozenset[str]:
    """The images ``values`` name (each may be a comma-separated list), normalised."""
    images: set[str] = set()
    for value in values:
        for raw in value.split(","):
            text = raw.strip()
            if text in ("*", "all", "any"):
                raise PolicyError(
                    f"{source} {text!r}: every image is never allowed; name each image "
                    "as NAME[:TAG] (docker.io/library/busybox:1.36)"
                )
            if not is_reference(text):
                raise PolicyError(
                    f"{source} {text[:MAX_REFERENCE_CHARS]!r}: not an image reference; "
                    "name it as NAME[:TAG], lower case (busybox:1.36)"
                )
            images.add(normalise_image(text))
    return frozenset(images)


def parse_network(value: str, source: str = "--containers-network") -> NetworkMode:
    """The network mode ``value`` names."""
    try:
        return NetworkMode(value.strip())
    except ValueError:
        raise PolicyError(
            f"{source} {value!r}: not a containers network; use none or engine"
        ) from None


def parse_engine(value: str, source: str = "--containers-engine") -> Path:
    """The engine socket ``unix:///PATH`` names (a TCP engine is refused: the bridge
    speaks to a Unix socket the owner's own user can reach)."""
    if not value.startswith(UNIX_SCHEME) or not value[len(UNIX_SCHEME) :].startswith("/"):
        raise PolicyError(
            f"{source} {value!r}: not a unix:///PATH address; the bridge forwards to an "
            "engine's Unix socket (unix:///run/podman/podman.sock)"
        )
    return Path(value[len(UNIX_SCHEME) :])


def engine_candidates(
    environ: Mapping[str, str], system: tuple[str, ...] = SYSTEM_ENGINES
) -> list[Path]:
    """Where the owner's engine may listen, in the order asked: ``$DOCKER_HOST`` when it
    is a Unix socket, rootful podman and Docker (``system``), rootless podman."""
    found: list[Path] = []
    host = environ.get("DOCKER_HOST", "")
    if host.startswith(UNIX_SCHEME) and host[len(UNIX_SCHEME) :].startswith("/"):
        found.append(Path(host[len(UNIX_SCHEME) :]))
    found += [Path(path) for path in system]
    runtime = environ.get("XDG_RUNTIME_DIR")
    if runtime:
        found.append(Path(runtime) / ROOTLESS_PODMAN)
    return found


def default_engine(environ: Mapping[str, str], system: tuple[str, ...] = SYSTEM_ENGINES) -> Path:
    """The first of :func:`engine_candidates` that exists, else refused naming them all."""
    candidates = engine_candidates(environ, system)
    for path in candidates:
        if os.path.exists(path):
            return path
    tried = ", ".join(str(path) for path in candidates)
    raise PolicyError(
        f"--containers: no container engine socket found (tried {tried}); start the "
        "engine's API service (podman system service) or name it with --containers-engine"
    )
