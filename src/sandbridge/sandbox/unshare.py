"""The util-linux ``unshare`` backend, for machines without bubblewrap.

``unshare`` makes the namespaces (user, mount, PID, network, IPC, UTS);
:mod:`sandbridge.sandbox.unshare_init` then builds the same file system view that the
bwrap backend builds, pivots into it and starts the sandbox entry. ``setpriv
--pdeathsig KILL`` ties ``unshare`` to the host process, and ``--kill-child`` ties the
namespace's first process to ``unshare``: a SIGKILL of the host ends the sandbox.
"""

from __future__ import annotations

import json
import sys

from sandbridge.places import host_commands
from sandbridge.sandbox.spec import SandboxSpec, sandbox_env


def available() -> bool:
    return host_commands.which("unshare") is not None and host_commands.which("setpriv") is not None


def init_config(spec: SandboxSpec) -> str:
    """The JSON that tells the in-namespace init what to mount."""
    optional = spec.optional_pins()
    return json.dumps(
        {
            "workdir": str(spec.workdir),  # bound as the first of "mounts"
            "runtime_dir": str(spec.runtime_dir),
            "home": str(spec.home),
            "private_home": spec.home != spec.workdir,
            # An agent's kept home, bound there in place of the tmpfs (spec.home_source).
            "home_source": None if spec.home_source is None else str(spec.home_source),
            "tooling": [str(path) for path in spec.tooling_paths()],
            "private": [str(path) for path in spec.guard.private],
            "mounts": [
                {
                    "source": str(m.source),
                    "dest": str(m.dest),
                    "writable": m.writable,
                    "optional": m in optional,
                }
                for m in spec.bind_sequence()
            ],
            "read_only_paths": [
                {"dest": str(m.dest), "writable": m.writable} for m in spec.read_only_paths
            ],
            "policy": {
                "dir": None if spec.policy_dir is None else str(spec.policy_dir),
                "files": list(spec.policy_files),
                "views": [str(path) for path in spec.policy_views()],
                "other_views": [str(path) for path in spec.other_policy_views()],
            },
            "masked": [str(path) for path in spec.guard.masked],
            "env": sandbox_env(spec.home, spec.env),
            "new_session": spec.new_session,
            "loopback": spec.network.own_namespace,
            "argv": spec.entry_argv,
        }
    )


def setup_payload(spec: SandboxSpec) -> bytes:
    """:func:`init_config`, for the init to read from :attr:`SandboxSpec.setup_fd`."""
    return init_config(spec).encode()


def argv(spec: SandboxSpec) -> list[str]:
    """``setpriv`` and ``unshare`` around the init, which reads its configuration from
    :attr:`SandboxSpec.setup_fd` (``--fd N``), or inline without one (``--dry-run``).

    The init is the PID namespace's first process, its command line readable by every
    local user in /proc: the paths it mounts (every other project the owner runs among
    them) and the environment's values stay off it."""
    config = [init_config(spec)] if spec.setup_fd is None else ["--fd", str(spec.setup_fd)]
    return [
        host_commands.require("setpriv"),
        "--pdeathsig",
        "KILL",
        "--",
        host_commands.require("unshare"),
        "--user",
        "--map-root-user",
        "--mount",
        "--pid",
        *(["--net"] if spec.network.own_namespace else []),
        "--ipc",
        "--uts",
        "--fork",
        "--kill-child",
        "--",
        sys.executable,
        "-P",  # not the working directory's modules: the workdir, which the sandbox writes
        "-m",
        "sandbridge.sandbox.unshare_init",
        *config,
    ]
