"""``sandbridge run --agent NAME``: the options, and what they add to a session (the
profile's hosts to the policy, its command, its state binds, its credentials, the bridge
hints). The profiles and the state are :mod:`sandbridge.agents`'s; docs/agents.md."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sandbridge.agents.home import AgentHome
from sandbridge.exceptions import AgentError
from sandbridge.project.policy import ENV_NAME, NetMode, Policy
from sandbridge.sandbox.mounts import Mount

# The profiles' catalogue and the agent's state and hints are imported when ``--agent``
# names one: a session without an agent reads the options' names alone.
if TYPE_CHECKING:
    from sandbridge.agents.profile import AgentProfile
    from sandbridge.agents.state import AgentState


@dataclass(frozen=True, slots=True)
class AgentSetup:
    """What an agent adds to one session's sandbox: its home (kept or lockdown) or the
    owner's real state paths bound, and the credentials passed (values: they go into the
    sandbox's environment, never on a command line)."""

    home: Path | None
    mounts: tuple[Mount, ...]
    credentials: dict[str, str]


def add_options(parser: argparse.ArgumentParser) -> None:
    """``--agent``, ``--agent-home``, ``--lockdown``, ``--credential``."""
    group = parser.add_argument_group("agent (docs/agents.md)")
    group.add_argument(
        "--agent",
        default=None,
        metavar="NAME",
        help="run the agent NAME's profile: its command (-- ARGS are appended), its API "
        "hosts, its own state, its credentials (sandbridge agents lists them)",
    )
    group.add_argument(
        "--agent-home",
        choices=[AgentHome.KEPT.value, AgentHome.HOST.value],
        default=AgentHome.KEPT.value,
        help="kept (default): the agent's state kept per agent and project by sandbridge; "
        "host: your real state (~/.claude and the like), read and written by the sandbox",
    )
    group.add_argument(
        "--lockdown",
        action="store_true",
        help="a fresh agent state, removed when the session ends",
    )
    group.add_argument(
        "--credential",
        action="append",
        default=[],
        metavar="NAME",
        help="pass your variable NAME too, if set (never printed, never on a command line)",
    )


def profile(args: argparse.Namespace) -> AgentProfile | None:
    """The profile ``--agent`` names, or None; the agent options without it are refused."""
    name = getattr(args, "agent", None)
    if name is None:
        for flag, given in (
            ("--lockdown", getattr(args, "lockdown", False)),
            ("--agent-home host", getattr(args, "agent_home", None) == AgentHome.HOST.value),
            ("--credential", bool(getattr(args, "credential", []))),
        ):
            if given:
                raise AgentError(f"{flag} needs --agent NAME (sandbridge agents lists them)")
        return None
    if args.lockdown and args.agent_home == AgentHome.HOST.value:
        raise AgentError("--lockdown and --agent-home host: choose one (a fresh home or yours)")
    for value in args.credential:
        if not ENV_NAME.fullmatch(value):
            raise AgentError(f"--credential {value!r}: not a variable name; give NAME alone")
    from sandbridge.agents import catalogue

    return catalogue.find(name)


def profile_allow(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The profile's hosts as allow entries, each with the profile as its source."""
    found = profile(args)
    return [] if found is None else [(host, found.policy_source) for host in found.hosts]


def command(args: argparse.Namespace, words: list[str]) -> list[str]:
    """What the sandbox runs: the profile's command with ``words`` (the ``-- ARGS``)
    appended, or ``words`` alone without ``--agent``."""
    found = profile(args)
    return words if found is None else [*found.command, *words]


def home_of(args: argparse.Namespace) -> AgentHome:
    """The home the options ask for."""
    return AgentHome.LOCKDOWN if args.lockdown else AgentHome(args.agent_home)


def credentials(
    args: argparse.Namespace, agent: AgentProfile, policy: Policy, environ: Mapping[str, str]
) -> dict[str, str]:
    """The profile's and ``--credential``'s variables that the owner's environment sets
    (those the project's ``.sandbridge/env`` sets pass already, as its values)."""
    names = dict.fromkeys([*agent.credentials, *args.credential])
    already = {setting.name for setting in policy.env}
    return {name: environ[name] for name in names if name in environ and name not in already}


def setup(
    args: argparse.Namespace,
    root: Path,
    workdir: Path,
    policy: Policy,
    inside_home: Path,
) -> tuple[AgentState, dict[str, str]] | None:
    """The agent's state binds and credentials for a session (None without ``--agent``),
    its hints written; says on stderr what the agent gets, by name only."""
    agent = profile(args)
    if agent is None:
        return None
    from sandbridge.agents.hints import hints
    from sandbridge.agents.state import prepare, write_hints

    if inside_home == workdir:
        raise AgentError(
            f"--agent {agent.name}: the workdir {workdir} is the sandbox's home, where the "
            "agent's state would be bound into your files; run from a project directory"
        )
    home = home_of(args)
    owner = os.environ.get("HOME")
    state = prepare(agent, home, root, inside_home, Path(owner) if owner else None)
    try:
        _say_state(agent, state)
        if agent.instructions is None:
            _say(f"agent {agent.name}: no instruction file in its profile; no bridge hints")
        elif state.directory is None:
            _say(
                f"agent {agent.name}: --agent-home host: bridge hints not written (never "
                f"into your real ~/{agent.instructions})"
            )
        else:
            allow = policy.mode.value is NetMode.ALLOW
            block = hints(
                policy.gate if allow else None,
                tuple(s.port for s in policy.host_services) if allow else (),
            )
            write_hints(state.directory, agent.instructions, block)
        passed = credentials(args, agent, policy, os.environ)
        wanted = dict.fromkeys([*agent.credentials, *args.credential])
        if wanted:
            project = {setting.name for setting in policy.env}
            missing = [name for name in wanted if name not in passed and name not in project]
            _say(
                f"agent {agent.name}: credentials passed: {', '.join(passed) or '(none)'}"
                + (f"; not set here: {', '.join(missing)}" if missing else "")
            )
    except BaseException:
        state.finish()
        raise
    return state, passed


@contextlib.contextmanager
def session(
    args: argparse.Namespace, root: Path, workdir: Path, policy: Policy, inside_home: Path
) -> Iterator[AgentSetup | None]:
    """:func:`setup` for the time of a session (None without ``--agent``); a lockdown's
    state is removed when it ends."""
    found = setup(args, root, workdir, policy, inside_home)
    if found is None:
        yield None
        return
    state, passed = found
    try:
        yield AgentSetup(state.directory, state.mounts, passed)
    finally:
        state.finish()


def describe(args: argparse.Namespace, policy: Policy, root: Path) -> list[str]:
    """``--print-policy``'s lines for the agent (none without ``--agent``): its profile,
    command, state and credentials, each credential as ``NAME=<set>`` or ``<unset>``."""
    agent = profile(args)
    if agent is None:
        return []
    from sandbridge.agents.state import kept_dir

    home = home_of(args)
    where = {
        AgentHome.KEPT: f"kept in {kept_dir(agent, root)}",
        AgentHome.LOCKDOWN: "fresh, removed at the end (--lockdown)",
        AgentHome.HOST: "your real ones (--agent-home host)",
    }[home]
    passed = credentials(args, agent, policy, os.environ)
    project = {setting.name for setting in policy.env}
    names = dict.fromkeys([*agent.credentials, *args.credential])
    shown = [
        f"{name}=<set>" if name in passed or name in project else f"{name}=<unset>"
        for name in names
    ]
    return [
        f"agent {agent.name} ({agent.source})",
        f"  command      {' '.join(agent.command)}",
        f"  state        {', '.join(f'~/{p}' for p in agent.state_paths) or '(none)'}: {where}",
        f"  credentials  {', '.join(shown) or '(none)'}",
    ]


def _say_state(agent: AgentProfile, state: AgentState) -> None:
    paths = ", ".join(f"~/{path}" for path in agent.state_paths) or "(no state paths)"
    if state.home is AgentHome.HOST:
        _say(
            f"WARNING: --agent-home host: the sandbox reads and writes your real {paths} "
            "(docs/agents.md)"
        )
    elif state.home is AgentHome.LOCKDOWN:
        _say(f"agent {agent.name}: lockdown: a fresh {paths}, removed at the end")
    else:
        _say(f"agent {agent.name}: {paths} kept in {state.directory}")


def _say(text: str) -> None:
    print(f"sandbridge: {text}", file=sys.stderr, flush=True)
