"""Choosing a backend: ``auto`` is bubblewrap when installed, else util-linux unshare."""

from __future__ import annotations

from sandbridge.exceptions import SandboxError
from sandbridge.sandbox import bwrap, unshare
from sandbridge.sandbox.spec import SandboxSpec

BACKENDS = ("auto", "bwrap", "unshare")


def resolve(name: str) -> str:
    """The concrete backend for ``name``, or a clear error if it is not installed."""
    if name == "auto":
        if bwrap.available():
            return "bwrap"
        if unshare.available():
            return "unshare"
        raise SandboxError("neither bubblewrap (bwrap) nor util-linux unshare is installed")
    if name == "bwrap" and not bwrap.available():
        raise SandboxError("--backend bwrap: bwrap is not installed (apt-get install bubblewrap)")
    if name == "unshare" and not unshare.available():
        raise SandboxError("--backend unshare: unshare or setpriv (util-linux) is not installed")
    if name not in BACKENDS:
        raise SandboxError(f"--backend {name!r}: choose one of {', '.join(BACKENDS)}")
    return name


def sandbox_argv(backend: str, spec: SandboxSpec) -> list[str]:
    """The command line that starts the sandbox with ``backend``."""
    argv = bwrap.argv(spec) if _concrete(backend) == "bwrap" else unshare.argv(spec)
    return spec.network.wrap(argv)


def setup_payload(backend: str, spec: SandboxSpec) -> bytes:
    """What the backend reads from :attr:`SandboxSpec.setup_fd`: the whole set-up."""
    if _concrete(backend) == "bwrap":
        return bwrap.setup_payload(spec)
    return unshare.setup_payload(spec)


def _concrete(backend: str) -> str:
    """``backend`` as :func:`resolve` gave it (a run resolves it once, at its start: each
    question to it looks up its programs on PATH again), else resolved now. A backend
    whose programs went meanwhile is still refused: by its own lookup of them, which
    names what is missing."""
    return backend if backend in ("bwrap", "unshare") else resolve(backend)
