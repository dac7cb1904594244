"""``sandbridge policy survey`` and ``sandbridge policy init`` (docs/policy.md)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

from sandbridge.exceptions import PolicyError
from sandbridge.places import host_commands, known_projects
from sandbridge.project.policy import PolicyBuilder, format_entry
from sandbridge.sandbox.project import project_root, secrets_file_ignored
from sandbridge.survey import init_policy, presets
from sandbridge.survey.findings import Finding, Kind
from sandbridge.survey.toolchain_index import ASKED, toolchain_indexes
from sandbridge.survey.walk import describe, survey


def add_policy(parser: argparse.ArgumentParser) -> None:
    """``sandbridge policy``'s commands."""
    actions = parser.add_subparsers(dest="action", required=True)
    look = actions.add_parser(
        "survey", help="list the hosts, ports and variable names a project declares (no values)"
    )
    look.add_argument("directory", nargs="?", type=Path, default=None, help="default: cwd")
    look.add_argument("--json", action="store_true", help="print JSON for tools")
    look.set_defaults(func=cmd_survey)
    init = actions.add_parser(
        "init", help="write .sandbridge/allow, config and env.example from the survey"
    )
    init.add_argument(
        "directory", nargs="?", type=Path, default=None, help="default: cwd's project root"
    )
    init.add_argument("--force", action="store_true", help="replace an existing policy")
    init.add_argument(
        "--resolver",
        default=None,
        metavar="IP[:PORT]",
        help="DNS server to ask for the index hosts' addresses (also written to config, "
        "for the proxy to ask); default: this host's resolver",
    )
    init.set_defaults(func=cmd_init)


def _directory(args: argparse.Namespace) -> Path:
    directory = (args.directory or Path.cwd()).resolve()
    if not directory.is_dir():
        raise PolicyError(f"{args.directory}: not a directory")
    host_commands.distrust([directory])  # a sandbox wrote it: its git is never run
    return directory


def cmd_survey(args: argparse.Namespace) -> int:
    found = survey(_directory(args))
    if args.json:
        print(json.dumps(found.to_json(), indent=2))
    else:
        for line in describe(found):
            print(line)
    return 0


def _is_index(finding: Finding) -> bool:
    """A registry or index host (what replaces a toolchain's default, or its file host)."""
    preset = presets.PRESETS.get(finding.ecosystem)
    if finding.kind is not Kind.HOST or preset is None:
        return False
    return presets.replaces_default(preset, [finding]) or ASKED in finding.what


def cmd_init(args: argparse.Namespace) -> int:
    """Survey the project root, write its policy, then print it as ``--print-policy``."""
    # Only here: the resolver's event loop, and the effective policy's whole reading.
    import asyncio

    from sandbridge.cli import network as network_cli
    from sandbridge.egress.gate import DnsResolver, SystemResolver
    from sandbridge.survey.index_addresses import non_global_names

    root = project_root(_directory(args))
    resolver = None
    if args.resolver is not None:
        builder = PolicyBuilder()
        builder.set("resolver", args.resolver, "--resolver")
        resolver = builder.resolver.value
    found = survey(root)
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    registries = presets.host_registries(presets.HostConfig.of_this_host())
    # The tools of the project's own toolchains alone are asked (each costs a start of
    # pip or npm): the policy has a section for those only.
    registries += toolchain_indexes(os.environ, init_policy.project_ecosystems(found))
    # The owner's own registries only: a name the project's files chose (the sandbox may
    # have written them) is not sent to a DNS server, so no data spelled into it leaves.
    indexes = [f.name for f in registries if _is_index(f)]
    asked = SystemResolver() if resolver is None else DnsResolver(*resolver)
    non_global = asyncio.run(non_global_names(indexes, asked))
    shown = None if resolver is None else format_entry(*resolver)
    files = init_policy.plan(found, registries, today, non_global, shown)
    ignored = secrets_file_ignored(root)
    for path in init_policy.write(root, files, args.force, ignored):
        print(f"sandbridge: wrote {path}", file=sys.stderr)
    known_projects.remember(root)  # every sandbox hides its .sandbridge/ from now on
    if ignored is not None and not secrets_file_ignored(root):
        print(
            f"sandbridge: warning: git still does not ignore {init_policy.ENV_FILE} (a rule "
            "in a .gitignore below the root, or in .git/info/exclude, takes it back): "
            "`git check-ignore -v --no-index .sandbridge/env` shows which; fix it before "
            "you write secrets there",
            file=sys.stderr,
        )
    network_cli.print_policy(network_cli.project_policy(root))
    return 0
