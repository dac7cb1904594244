"""sandbridge's own host paths, and how every sandbox is kept from seeing them.

What sandbridge keeps on the host is worth more to a sandbox than anything else there:
other sessions' runtime dirs (their ``relay.sock``, ``upstream.sock``, ``egress.sock``),
the state dir (every session's ``control.sock``, egress log), the owner's key dir
(``owner.key``, ``requesters``) and the terminal journals. A sandbox sees the host through
layers: the host's root read-only (with private ``/tmp``, ``/run``, ``/dev``, ``/proc``
and home), then the tooling, the workdir and the ``--bind``/``--ro-bind`` mounts. For each
layer and each protected path this module decides one of three things:

* the layer *is* a protected path, lies inside one, or *is* a directory where sessions
  create runtime dirs (``/tmp``, ``$XDG_RUNTIME_DIR``): refuse before anything starts.
  Runtime dirs of sessions started later appear through such a bind, so no mask made now
  could hide them; an AF_UNIX socket on a read-only mount still accepts connections, so
  ``--ro-bind`` is refused alike;
* the layer contains a protected path deeper down: cover it with an empty tmpfs after
  every bind. A tmpfs over a directory that exists when the sandbox starts hides what is
  created under it later too, so sandbridge's own dirs are created (0700) first. In a
  writable layer the directories between the layer and the mask are bound onto
  themselves ("pinned"): a mount point cannot be renamed, so the sandbox cannot move the
  masked dir aside and plant its own (an ``owner.key`` of its choosing) in its place;
* the layer shows host ``/proc``: refuse, since ``/proc/<pid>/root`` leads everywhere.

All of it is computed here, once, into a :class:`Guard` that both backends apply.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from sandbridge.exceptions import SandboxError
from sandbridge.path_within import is_within
from sandbridge.private_dir import make_private_dir
from sandbridge.protocol.contract import RUNTIME_DIR_PREFIX, STATE_PREFIX, runtime_base
from sandbridge.sandbox.mounts import Mount
from sandbridge.terminals import journal
from sandbridge.terminals.config_dir import config_dir

# Where a session without XDG_RUNTIME_DIR keeps its runtime and state dirs, whatever
# this session's own XDG_RUNTIME_DIR says.
SHARED_BASE = Path("/tmp")
# Names sandbridge makes directly in a runtime base (runtime dirs, their staging names,
# state roots ``sandbridge-<uid>`` of any user and their fallbacks): a bind of anything
# under them is refused.
OWNED_NAME = re.compile(
    rf"\.?{re.escape(RUNTIME_DIR_PREFIX)}|{re.escape(STATE_PREFIX)}[0-9]+(\.|$)"
)
HOST_PROC = Path("/proc")
# Covered by a private tmpfs or a fresh mount in every sandbox's base view.
PRIVATE_TOPS = (Path("/tmp"), Path("/run"), Path("/dev"), HOST_PROC)


@dataclass(frozen=True, slots=True)
class Layer:
    """One host directory the sandbox sees, and the flag that asked for it (for errors)."""

    mount: Mount
    flag: str


@dataclass(frozen=True, slots=True)
class Guard:
    """What a backend adds to keep sandbridge's host paths out of one sandbox.

    ``private``: empty tmpfs mounts in the base view, before any bind (protected paths
    the read-only host root would show). ``pins[i]``: self-binds right after bind ``i``
    of the spec's bind sequence. ``masked``: empty tmpfs mounts after every bind.
    """

    private: tuple[Path, ...] = ()
    pins: tuple[tuple[Mount, ...], ...] = ()
    masked: tuple[Path, ...] = ()


def _base_candidates() -> list[Path]:
    return [SHARED_BASE, runtime_base(), Path(f"/run/user/{os.getuid()}")]


def _owned_candidates() -> list[Path]:
    home = Path.home()
    return [
        config_dir(),
        home / ".config" / "sandbridge",
        journal.state_dir().parent,
        home / ".local" / "state" / "sandbridge",
    ]


def runtime_bases() -> list[Path]:
    """Directories where sessions of this user create runtime and state dirs."""
    bases: list[Path] = []
    for path in _base_candidates():
        if path.is_dir() and (resolved := path.resolve()) not in bases:
            bases.append(resolved)
    return bases


def owned_dirs() -> list[Path]:
    """sandbridge's per-user dirs: the key dir and the terminal journals' dir, for this
    environment's XDG variables and for the defaults other shells of this user use."""
    dirs: list[Path] = []
    for path in _owned_candidates():
        if (resolved := path.absolute().resolve()) not in dirs:
            dirs.append(resolved)
    return dirs


def _links_on_the_way(layer: Layer) -> list[Path]:
    """Symlinks inside writable ``layer`` that lead to one of sandbridge's paths: the
    sandbox could replace such a link and so choose where later sessions keep their
    state or where the owner's key is read from."""
    if not layer.mount.writable:
        return []
    found = []
    for path in [*_base_candidates(), *_owned_candidates()]:
        for step in [path.absolute(), *path.absolute().parents]:
            if step.is_symlink() and _strictly_inside(
                step.parent.resolve() / step.name, layer.mount.source
            ):
                found.append(step)
    return found


# A state root (``sandbridge-<uid>``, or a fallback ``sandbridge-<uid>.<random>``) and a
# runtime dir (or its staging name), as the first name under a runtime base.
STATE_ROOT_NAME = re.compile(rf"{re.escape(STATE_PREFIX)}[0-9]+(\.|$)")
RUNTIME_DIR_NAME = re.compile(rf"\.?{re.escape(RUNTIME_DIR_PREFIX)}")


def exposure(runtime_dir: Path) -> str | None:
    """Why a container that mounts ``runtime_dir`` (``sandbridge host --runtime-dir``, or
    a dir the daemon is asked to serve) would see more of sandbridge than its own
    sockets, or None if it would not: a runtime base (every session's runtime dir, the
    state roots with ``daemon.sock`` and every ``control.sock``), a state root or
    anything in one, a directory inside another session's runtime dir, or
    sandbridge's private dirs (the owner's key, the journals)."""
    path = runtime_dir.absolute().resolve()
    for base in runtime_bases():
        if _inside(base, path):
            return (
                f"it holds {base}, where sessions keep their runtime dirs and sandbridge "
                "its state (the daemon's socket, every session's control socket)"
            )
        if not _strictly_inside(path, base):
            continue
        parts = path.relative_to(base).parts
        if STATE_ROOT_NAME.match(parts[0]):
            where = "is" if len(parts) == 1 else "is inside"
            return f"it {where} {base / parts[0]}, sandbridge's own session state"
        if RUNTIME_DIR_NAME.match(parts[0]) and len(parts) > 1:
            return f"it is inside {base / parts[0]}, another session's runtime dir"
    for owned in owned_dirs():
        if _inside(owned, path) or _inside(path, owned):
            return f"it is or holds {owned}, sandbridge's private dir (owner key, journals)"
    return None


def _inside(path: Path, top: Path) -> bool:
    return is_within(path, top)


def _strictly_inside(path: Path, top: Path) -> bool:
    return path != top and is_within(path, top)


def _between(top: Path, bottom: Path) -> list[Path]:
    """Directories strictly between ``top`` and ``bottom``, shallowest first."""
    return sorted(p for p in bottom.parents if _strictly_inside(p, top))


def _ensure(path: Path) -> None:
    """Create one of sandbridge's own dirs (0700) so a mask over it hides later content."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    make_private_dir(path, "sandbridge dir", SandboxError)


def _refuse(layer: Layer, why: str, advice: str) -> SandboxError:
    return SandboxError(f"{layer.flag} {layer.mount.source}: {why}; {advice}")


def plan(layers: list[Layer], home: Path, *, create: bool = True) -> Guard:  # noqa: PLR0912  (one decision per layer and protected path, the module docstring's three cases)
    """The :class:`Guard` for a sandbox made of ``layers`` (bound in that order) over the
    read-only host root, whose ``home`` the sandbox never sees (a private tmpfs or a layer).

    Refuses, with the offending path and what to do instead, a layer that no mask can
    make safe. With ``create`` (the default), makes sandbridge's own dirs that a mask
    must cover.
    """
    bases = runtime_bases()
    owned = owned_dirs()
    private_tops = [*PRIVATE_TOPS, home]
    private = [
        path for path in [*bases, *owned] if not any(_inside(path, top) for top in private_tops)
    ]
    masked: list[Path] = []
    pins: list[tuple[Mount, ...]] = []
    to_create: list[Path] = [path for path in owned if path in private]
    for layer in layers:
        source, dest = layer.mount.source, layer.mount.dest
        if _inside(source, HOST_PROC) or _inside(HOST_PROC, source):
            raise _refuse(
                layer,
                "it shows the host's /proc, through which a sandbox reaches every "
                "process's files, other sessions' included",
                "bind a directory that does not contain /proc",
            )
        for link in _links_on_the_way(layer):
            raise _refuse(
                layer,
                f"{link} is a symlink the sandbox could replace, and sandbridge's own "
                "dirs lie through it",
                f"bind a directory that does not contain {link}",
            )
        hidden: list[Path] = []
        for base in bases:
            if source == base:
                raise _refuse(
                    layer,
                    "sandbridge sessions keep their runtime dirs and sockets directly in "
                    "it, including sessions started later",
                    f"use a subdirectory such as {base / 'work'}",
                )
            if _strictly_inside(base, source):
                hidden.append(base)
            elif _inside(source, base) and OWNED_NAME.match(source.relative_to(base).parts[0]):
                raise _refuse(layer, "it is sandbridge's own session state", "bind something else")
        for path in owned:
            if _inside(source, path):
                raise _refuse(
                    layer,
                    f"it is inside {path}, sandbridge's private dir (owner key, requesters, "
                    "terminal journals)",
                    "bind something else",
                )
            if _strictly_inside(path, source):
                hidden.append(path)
                to_create.append(path)
        layer_pins: list[Mount] = []
        for path in hidden:
            masked.append(dest / path.relative_to(source))
            if layer.mount.writable:
                for between in _between(source, path):
                    pin = Mount(between, dest / between.relative_to(source), writable=True)
                    if pin not in layer_pins:
                        layer_pins.append(pin)
        pins.append(tuple(sorted(layer_pins, key=lambda m: len(m.dest.parts))))
    if create:
        for path in to_create:
            _ensure(path)
    return Guard(
        private=tuple(private),
        pins=tuple(pins),
        masked=tuple(sorted(set(masked), key=lambda p: (len(p.parts), p))),
    )
