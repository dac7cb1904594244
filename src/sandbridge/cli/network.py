"""The network part of the command line: options, ``--print-policy``, ``--dry-run``.

Kept apart from :mod:`sandbridge.cli.sessions` so the policy's flags, their inspection and the
effective policy live in one place (``status`` is ``status.py``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbridge.cli import agent_options
from sandbridge.cli.relay_options import describe_bridges
from sandbridge.egress.shadowing import policy_warnings
from sandbridge.exceptions import PolicyError
from sandbridge.project.policy import NetMode, Policy, describe, load_policy, mask_credentials
from sandbridge.project.secrets_file import read_secrets
from sandbridge.protocol.publish_rules import is_rule_value, publishes_any
from sandbridge.sandbox import project as policy_location
from sandbridge.sandbox.backend import sandbox_argv
from sandbridge.sandbox.network import SandboxNetwork
from sandbridge.sandbox.spec import SandboxSpec

HIDDEN = "***"


def add_options(parser: argparse.ArgumentParser) -> None:
    """``--net``, ``--allow``, ``--gate-addr``, ``--resolver``, ``--publish``."""
    group = parser.add_argument_group("network (adds to .sandbridge/allow and config)")
    group.add_argument(
        "--net",
        choices=[mode.value for mode in NetMode],
        default=None,
        help="none: loopback only; allow (default): the policy's host services and "
        "egress proxy only; full: the host's network",
    )
    group.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="ENTRY",
        help="add an allow entry: GATE:PORT, NAME[:PORT], *.NAME[:PORT], IP[:PORT] [private]",
    )
    group.add_argument(
        "--gate-addr", default=None, metavar="IP", help="the gate address (default 100.64.0.1)"
    )
    group.add_argument(
        "--resolver", default=None, metavar="IP[:PORT]", help="DNS server the proxy asks"
    )
    group.add_argument(
        "--publish",
        action="append",
        default=[],
        metavar="PORT[:/BASE]|auto|LOW-HIGH",
        help="register sandbox PORT through the relay as soon as an app listens on it; "
        "auto or LOW-HIGH: register every port (in that range) that starts listening, "
        "and close it when it stops (publish = ... in .sandbridge/config sets actions)",
    )


def add_inspect_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--print-policy",
        action="store_true",
        help="print the effective network policy and where each entry came from",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the sandbox invocation; start nothing"
    )


def policy(
    args: argparse.Namespace,
    workdir: Path,
    located: tuple[Path, bool] | None = None,
) -> Policy:
    """The effective policy for ``sandbridge run``/``demo`` in ``workdir``: the project
    root's ``.sandbridge/`` only (sandbox/project.py), then the flags. ``located``: the
    project root and whether git has it, when the caller has already asked git."""
    root, in_git = policy_location.locate(workdir) if located is None else located
    policy_location.check(workdir, root, in_git)
    policy_location.check_secrets_file(root)
    return load_policy(
        root,
        net=args.net,
        gate_addr=args.gate_addr,
        resolver=args.resolver,
        allow=args.allow,
        publish=[value for value in args.publish if is_rule_value(value)],
        secrets=read_secrets(root),
        profile_allow=agent_options.profile_allow(args),
    )


def project_policy(root: Path) -> Policy:
    """The policy of the project at ``root`` without flags, checked as ``run`` checks it."""
    policy_location.check(root, root)
    policy_location.check_secrets_file(root)
    return load_policy(root, secrets=read_secrets(root))


def print_policy(effective: Policy) -> None:
    """What ``--print-policy`` prints: the files read (stderr), then the policy."""
    print(files_line(effective), file=sys.stderr, flush=True)
    for line in describe(effective):
        print(line)
    for warning in policy_warnings(effective):
        print(f"warning: {warning}")


def files_line(effective: Policy) -> str:
    """The one line naming the policy files that were read."""
    files = ", ".join(str(path) for path in effective.files_read)
    return f"sandbridge: policy files read: {files or '(none)'}"


def sandbox_network(args: argparse.Namespace, effective: Policy) -> SandboxNetwork:
    """What the backend and the sandbox entry need of the policy."""
    fixed = [value for value in args.publish if not is_rule_value(value)]
    if fixed:  # only then: the publish helper's module is the sandbox's
        from sandbridge.relay.inside.publish import parse_publish
    for value in fixed:
        try:
            parse_publish(value)
        except ValueError as exc:
            raise PolicyError(str(exc)) from None
    return SandboxNetwork(
        mode=effective.mode.value,
        gate_addr=effective.gate,
        gate_ports=tuple(effective.gate_ports()),
        publish=tuple(fixed),
        publish_rules=tuple(rule.option() for rule in effective.publish)
        if publishes_any(effective.publish)
        else (),
    )


def announce(effective: Policy) -> None:
    """One line at session start saying what network the sandbox gets (a warning for full)."""
    mode = effective.mode.value
    if mode is NetMode.FULL:
        text = (
            f"WARNING: net = full ({effective.mode.source}): the sandbox uses the host's "
            "network; no egress policy is enforced"
        )
    elif mode is NetMode.NONE:
        text = "net none: loopback only"
    else:
        services = ", ".join(f"{effective.gate}:{s.port}" for s in effective.host_services)
        text = (
            f"net allow: host services {services or '(none)'}; egress proxy "
            f"{effective.proxy_url} for {len(effective.rules)} destination entries "
            "(--print-policy lists them)"
        )
    print(files_line(effective), file=sys.stderr, flush=True)
    print(f"sandbridge: {text}", file=sys.stderr, flush=True)
    if mode is NetMode.ALLOW:
        for warning in policy_warnings(effective):
            print(f"sandbridge: warning: {warning}", file=sys.stderr, flush=True)


def mask_argv(argv: list[str]) -> list[str]:
    """``argv`` without any environment value or URL credential.

    bwrap's ``--setenv NAME VALUE`` keeps NAME; the unshare backend's JSON configuration
    keeps its variables' names. Everything else passes through :func:`mask_credentials`.
    """
    masked: list[str] = []
    hide_next = 0
    for arg in argv:
        if hide_next == 2:
            masked.append(arg)
            hide_next = 1
            continue
        if hide_next == 1:
            masked.append(HIDDEN)
            hide_next = 0
            continue
        if arg == "--setenv":
            hide_next = 2
            masked.append(arg)
            continue
        masked.append(_mask_json_env(arg) if arg.startswith("{") else mask_credentials(arg))
    return masked


def _mask_json_env(arg: str) -> str:
    try:
        config: Any = json.loads(arg)
    except ValueError:
        return mask_credentials(arg)
    if isinstance(config, dict) and isinstance(config.get("env"), dict):
        config["env"] = {name: HIDDEN for name in config["env"]}
        config["argv"] = [mask_credentials(str(a)) for a in config.get("argv", [])]
        return json.dumps(config)
    return mask_credentials(arg)


def inspect(
    args: argparse.Namespace,
    spec_factory: Callable[[Path], SandboxSpec] | None,
    backend: str,
) -> int:
    """``--print-policy`` and ``--dry-run``: print, start nothing."""
    workdir = (args.workdir or Path.cwd()).resolve()
    effective = policy(args, workdir)
    if args.print_policy:
        print_policy(effective)
        for line in describe_bridges(args):
            print(line)
        root = policy_location.locate(workdir)[0]
        for line in agent_options.describe(args, effective, root):
            print(line)
    else:
        print(files_line(effective), file=sys.stderr, flush=True)
    if spec_factory is not None:
        from sandbridge.places.runtime_dir import default_path

        spec = spec_factory(default_path())
        print(shlex.join(mask_argv(sandbox_argv(backend, spec))))
    return 0
