"""Where a container may bind the host's files from: inside the workdir, and no further.

The engine mounts a bind's source on the host, outside the sandbox's mount namespace: it
sees the real workdir, not the sandbox's view. So a source is checked as the host sees
it (:func:`check_source`): resolved (every link followed, so a link the sandbox left in
the workdir that leads out is refused by where it leads), then ``lstat``-ed (a directory
or a regular file; no socket, no device), inside the workdir, not the engine's socket nor
the session's runtime dir (nor a directory holding them), and the resolved path is what
the engine is sent. And what the sandbox's own view keeps from it stays kept
(:func:`shields`): each path the sandbox sees read-only (git's hooks and config,
sandbridge's policy files: sandbox/protected_paths.py) is bound read-only over the
container's view of it, and each policy directory (``.sandbridge``, the secrets file in
it) is covered with an empty directory, read-only (not a tmpfs: podman copies what lies
under a tmpfs into it).

The engine mounts a bind when the container starts, not when it is created: so each
start is checked again (:func:`unchanged`): every source the create sent must still be
its own resolved path, no link on the way, a directory or a regular file. What this
cannot close: a directory swapped for a link in the moment between that check and the
engine's mount, a race (docs/security.md, "residual risks").
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sandbridge.exceptions import ContainerRefused

MAX_PATH_CHARS = 4096


@dataclass(frozen=True, slots=True)
class Protected:
    """A path the sandbox sees read-only (``writable``: a directory pinned in place, as
    the sandbox's view pins it, so that it cannot be moved aside)."""

    path: Path
    writable: bool = False


@dataclass(frozen=True, slots=True)
class BindRules:
    """What the session's binds are checked against: the workdir (resolved), the empty
    directory that covers what is hidden (``cover``: in the session's own dir, which
    neither the sandbox nor a container writes), the paths no bind may reach (the engine
    socket, the runtime dir), the sandbox's protected paths and the policy directories
    hidden from it."""

    workdir: Path
    cover: Path
    forbidden: tuple[Path, ...] = ()
    protected: tuple[Protected, ...] = ()
    hidden: tuple[Path, ...] = ()
    # Where the sandbox itself sees the host's files (the workdir, its binds): the
    # engine's socket there would be the engine, reached around the bridge.
    visible: tuple[Path, ...] = ()


def check_source(source: str, field: str, rules: BindRules) -> Path:
    """The resolved host path of a bind's ``source``; refused (:class:`ContainerRefused`
    naming ``field``) when it is not a path inside the workdir the container may have."""
    if not source.startswith("/") or "\0" in source or len(source) > MAX_PATH_CHARS:
        raise ContainerRefused(
            field, "binds-inside-workdir", f"{source[:200]!r} is not a host path"
        )
    resolved = Path(os.path.realpath(source))
    if not resolved.is_relative_to(rules.workdir):
        how = "" if resolved == Path(os.path.normpath(source)) else f" (a link leads to {resolved})"
        raise ContainerRefused(
            field,
            "binds-inside-workdir",
            f"{source[:200]} is outside the workdir {rules.workdir}{how}",
        )
    for path in rules.forbidden:
        if path.is_relative_to(resolved) or resolved.is_relative_to(path):
            raise ContainerRefused(
                field, "no-engine-socket", f"{source[:200]} reaches {path}, the bridge's own"
            )
    try:
        mode = os.lstat(resolved).st_mode
    except OSError as exc:
        raise ContainerRefused(
            field, "binds-inside-workdir", f"{source[:200]}: {exc.strerror}"
        ) from None
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise ContainerRefused(
            field, "binds-inside-workdir", f"{source[:200]} is not a directory or a regular file"
        )
    for path in rules.hidden:
        if resolved.is_relative_to(path):
            raise ContainerRefused(
                field,
                "protected-paths",
                f"{source[:200]} is inside {path}, hidden from the sandbox",
            )
    return resolved


def check_writable(resolved: Path, read_only: bool, field: str, rules: BindRules) -> None:
    """A bind inside a path the sandbox sees read-only must be read-only too."""
    if read_only:
        return
    for protected in rules.protected:
        if not protected.writable and resolved.is_relative_to(protected.path):
            raise ContainerRefused(
                field,
                "protected-paths",
                f"{resolved} is read-only in the sandbox ({protected.path}); bind it read-only",
            )


def shields(resolved: Path, target: str, rules: BindRules) -> list[dict[str, object]]:
    """The engine's ``Mounts`` entries that keep, in a container binding ``resolved`` at
    ``target``, what the sandbox's view keeps: its protected paths, in their order (one
    entry a path, read-only if any of its entries is), and the empty ``cover`` over each
    policy directory, read-only (which covers what is protected inside it: an engine
    refuses two mounts on one place)."""
    base = PurePosixPath(target)
    hidden = [
        h for h in dict.fromkeys(rules.hidden) if h.is_relative_to(resolved) and os.path.isdir(h)
    ]
    writable: dict[Path, bool] = {}
    for protected in rules.protected:
        path = protected.path
        if path == resolved or not path.is_relative_to(resolved) or not os.path.lexists(path):
            continue
        if any(path.is_relative_to(h) for h in hidden):
            continue
        writable[path] = writable.get(path, True) and protected.writable
    found: list[dict[str, object]] = [
        {"Type": "bind", "Source": str(path), "Target": str(base / path.relative_to(resolved)),
         "ReadOnly": not can_write}
        for path, can_write in writable.items()
    ]  # fmt: skip
    found += [
        {"Type": "bind", "Source": str(rules.cover), "Target": str(base / h.relative_to(resolved)),
         "ReadOnly": True}
        for h in hidden
    ]  # fmt: skip
    return found


def sources(host: object) -> tuple[str, ...]:
    """The host paths a checked create's ``HostConfig`` (as sent) binds: its ``Binds``'
    sources that are paths and its ``bind`` mounts' (the shields' included)."""
    if not isinstance(host, dict):
        return ()
    found = [b.split(":")[0] for b in host.get("Binds") or [] if b.startswith("/")]
    found += [
        m["Source"] for m in host.get("Mounts") or [] if m.get("Type") == "bind" and "Source" in m
    ]
    return tuple(dict.fromkeys(found))


def unchanged(paths: tuple[str, ...], field: str) -> None:
    """Refuse (naming ``field``) when a source checked at the create is no longer what was
    checked: a link on its way now (a directory moved aside and a link put in its place),
    gone, or no longer a directory or a regular file."""
    for path in paths:
        resolved = os.path.realpath(path)
        if resolved != path:
            raise ContainerRefused(
                field,
                "binds-inside-workdir",
                f"the bind source {path[:200]} is now a link to {resolved[:200]}: "
                "a bind is mounted when the container starts",
            )
        try:
            mode = os.lstat(path).st_mode
        except OSError as exc:
            raise ContainerRefused(
                field, "binds-inside-workdir", f"the bind source {path[:200]}: {exc.strerror}"
            ) from None
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
            raise ContainerRefused(
                field,
                "binds-inside-workdir",
                f"the bind source {path[:200]} is no longer a directory or a regular file",
            )
