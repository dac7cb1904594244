"""The bubblewrap backend: the argv that builds the sandbox with ``bwrap``."""

from __future__ import annotations

import os

from sandbridge.places import host_commands
from sandbridge.project.policy import NetMode
from sandbridge.protocol.contract import MOUNT_POINT
from sandbridge.sandbox.spec import SandboxSpec, sandbox_env


def available() -> bool:
    return host_commands.which("bwrap") is not None


def argv(spec: SandboxSpec) -> list[str]:
    """The command line that runs bwrap: its options on :attr:`SandboxSpec.setup_fd`
    (:func:`setup_payload`), read with ``--args FD``, or inline without one (``--dry-run``).

    bwrap's command line is the sandbox's first process's too, and every local user reads
    it in /proc: the paths of the owner's other projects, the binds and the environment's
    values stay off it."""
    bwrap = host_commands.require("bwrap")
    if spec.setup_fd is None:
        return [bwrap, *options(spec), "--", *spec.entry_argv]
    return [bwrap, "--args", str(spec.setup_fd), "--", *spec.entry_argv]


def setup_payload(spec: SandboxSpec) -> bytes:
    """:func:`options`, NUL-separated, for ``--args FD``."""
    return b"".join(os.fsencode(word) + b"\0" for word in options(spec))


def options(spec: SandboxSpec) -> list[str]:
    """bwrap options, in mount order: later mounts lie on top of earlier ones."""
    args = [
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        # Run as root, bwrap would leave the command every capability of its user
        # namespace (enough to unmount the read-only .sandbridge); as any other user it
        # drops them all. Drop them always.
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/run",
    ]
    if spec.network.own_namespace:
        args.append("--unshare-net")
    elif spec.network.mode is NetMode.ALLOW:
        # Nested in net_init's user namespace, where this user is root: keep the same
        # ids inside as without it.
        args += ["--uid", str(os.getuid()), "--gid", str(os.getgid())]
    if spec.new_session:
        args.append("--new-session")
    for path in spec.guard.private:
        args += ["--tmpfs", str(path)]
    if spec.home != spec.workdir and spec.home_source is not None:
        args += ["--bind", str(spec.home_source), str(spec.home)]
    elif spec.home != spec.workdir:
        args += ["--tmpfs", str(spec.home)]
    for path in spec.tooling_paths():
        args += ["--ro-bind", str(path), str(path)]
    for mount in spec.bind_sequence():
        args += ["--bind" if mount.writable else "--ro-bind", str(mount.source), str(mount.dest)]
    for mount in spec.read_only_paths:
        args += ["--bind" if mount.writable else "--ro-bind", str(mount.source), str(mount.dest)]
    args += _policy_views(spec)
    # Last, over every bind: sandbridge's own host paths that a bind brought into view.
    for path in spec.guard.masked:
        args += ["--tmpfs", str(path)]
    args += ["--bind", str(spec.runtime_dir), MOUNT_POINT]
    args += ["--chdir", str(spec.workdir), "--clearenv"]
    for name, value in sandbox_env(spec.home, spec.env).items():
        args += ["--setenv", name, value]
    return args


def _policy_views(spec: SandboxSpec) -> list[str]:
    """Over each view of the project's ``.sandbridge``: an empty tmpfs, the shown policy
    files bound in read-only, then the tmpfs made read-only. Nothing the owner creates
    there later is in it; the tmpfs is a mount point the sandbox cannot rename away."""
    words: list[str] = []
    for view in spec.other_policy_views():  # another project's: nothing shown
        words += ["--tmpfs", str(view), "--remount-ro", str(view)]
    if spec.policy_dir is None:
        return words
    for view in spec.policy_views():
        words += ["--tmpfs", str(view)]
        for name in spec.policy_files:
            words += ["--ro-bind", str(spec.policy_dir / name), str(view / name)]
        words += ["--remount-ro", str(view)]
    return words
