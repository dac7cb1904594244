"""Bind mounts from the host into a sandbox, as ``--bind``/``--ro-bind`` give them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sandbridge.exceptions import SandboxError


@dataclass(frozen=True, slots=True)
class Mount:
    """A bind mount from the host ``source`` to ``dest`` inside the sandbox."""

    source: Path
    dest: Path
    writable: bool


def parse_mount(value: str, writable: bool) -> Mount:
    """Parse ``SRC`` or ``SRC:DEST`` from ``--bind``/``--ro-bind``."""
    source, _, dest = value.partition(":")
    flag = "--bind" if writable else "--ro-bind"
    try:
        src = Path(source).expanduser().resolve()
    except OSError as exc:
        raise SandboxError(f"{flag} {value!r}: {exc.strerror}") from None
    if not src.exists():
        raise SandboxError(f"{flag} {value!r}: {src} does not exist")
    target = Path(dest) if dest else src
    if not target.is_absolute():
        raise SandboxError(f"bind destination must be absolute, got {dest!r}")
    return Mount(src, target, writable)
