"""What a backend needs to know about the sandbox's network, and the argv around it.

* ``none``: the backend's own network namespace, loopback only.
* ``allow``: a network namespace made before the backend runs, in a user namespace of
  its own (:mod:`sandbridge.sandbox.net_init`), with the gate address on loopback; the
  backend joins it instead of making one, and nests the sandbox's user namespace inside.
* ``full``: the host's network namespace.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from sandbridge.places import host_commands
from sandbridge.project.policy import DEFAULT_GATE_ADDR, NetMode


@dataclass(frozen=True, slots=True)
class SandboxNetwork:
    """The network part of a :class:`~sandbridge.sandbox.spec.SandboxSpec`."""

    mode: NetMode = NetMode.NONE
    gate_addr: str = str(DEFAULT_GATE_ADDR)
    gate_ports: tuple[int, ...] = ()
    # ``PORT`` or ``PORT:/base`` values of --publish, registered by the entry.
    publish: tuple[str, ...] = ()
    # Auto-publish's rules in order, as ``LOW-HIGH:ACTION`` (protocol/publish_rules.py).
    publish_rules: tuple[str, ...] = ()

    @property
    def own_namespace(self) -> bool:
        """True if the backend itself must unshare the network (``none`` mode)."""
        return self.mode is NetMode.NONE

    def entry_options(self) -> list[str]:
        """Options of :mod:`sandbridge.sandbox.entry` for the gate listener and publishing."""
        options: list[str] = []
        if self.mode is NetMode.ALLOW:
            options += ["--gate", self.gate_addr]
            for port in self.gate_ports:
                options += ["--gate-port", str(port)]
        for value in self.publish:
            options += ["--publish", value]
        for rule in self.publish_rules:
            options += ["--publish-rule", rule]
        return options

    def wrap(self, argv: list[str]) -> list[str]:
        """The backend's argv, inside the prepared network namespace in ``allow`` mode."""
        if self.mode is not NetMode.ALLOW:
            return argv
        return [
            host_commands.require("unshare"),
            "--user",
            "--map-root-user",
            "--net",
            "--",
            sys.executable,
            "-P",  # not the working directory's modules: the sandbox writes the workdir
            "-m",
            "sandbridge.sandbox.net_init",
            self.gate_addr,
            "--",
            *argv,
        ]
