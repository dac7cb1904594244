"""The commands that serve a session: ``run``, ``demo`` and ``host`` (their arguments and
handlers; ``parser.py`` adds them to the command line when one of them is asked)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import resource
import signal
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from sandbridge.aio import event_loop
from sandbridge.aio.tasks import first_done, running
from sandbridge.cli import (
    agent_options,
    app_lines,
    bridge_options,
    clipboard_options,
    containers_options,
    ssh_agent_options,
)
from sandbridge.cli import network as network_cli
from sandbridge.cli.agent_options import AgentSetup
from sandbridge.cli.relay_options import (
    add_open_options,
    add_relay_options,
    open_settings,
    relay_settings_of,
)
from sandbridge.exceptions import SandboxError, SandbridgeError
from sandbridge.places import host_commands, known_projects, placeholder_lock
from sandbridge.places.registry import SessionEntry, list_sessions
from sandbridge.places.runtime_dir import RuntimeDir
from sandbridge.project.policy import NetMode, Policy, load_policy
from sandbridge.protocol.contract import EGRESS_SOCKET, MOUNT_POINT, PROXY_PORT
from sandbridge.protocol.daemon_wire import owner_stopped
from sandbridge.relay.host.app import App
from sandbridge.relay.host.settings import ForwardingMode
from sandbridge.sandbox import protected_paths
from sandbridge.sandbox.backend import BACKENDS, resolve
from sandbridge.sandbox.commands import JUPYTER_PATH_ENV, jupyter_config_path
from sandbridge.sandbox.host_paths import exposure
from sandbridge.sandbox.mounts import Mount, parse_mount
from sandbridge.sandbox.project import (
    POLICY_DIR,
    locate,
    project_root,
    secrets_file_warning,
    shown_policy_files,
)
from sandbridge.sandbox.protected_paths import Protection
from sandbridge.sandbox.spec import SandboxSpec, installation, parse_env
from sandbridge.session.options import SessionOptions
from sandbridge.session.run import default_home, host_half, run_session, stdin_is_terminal
from sandbridge.session.served import connect as connect_daemon


def _app_fields(app: App) -> dict[str, object]:
    return {**asdict(app), "action": None if app.action is None else app.action.value}


def _print_app(app: App) -> None:
    for line in app_lines.registered(_app_fields(app)):
        print(line, file=sys.stderr, flush=True)


def _print_gone(app: App) -> None:
    """An auto-published app whose socket closed: its host port is closed too."""
    for line in app_lines.gone(_app_fields(app)):
        print(line, file=sys.stderr, flush=True)


def _add_sandbox_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="sandbox backend (auto: bwrap if installed, else unshare)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="directory mounted read-write at the same path (default: cwd)",
    )
    parser.add_argument(
        "--bind",
        action="append",
        default=[],
        metavar="SRC[:DEST]",
        help="extra read-write bind mount",
    )
    parser.add_argument(
        "--ro-bind",
        action="append",
        default=[],
        metavar="SRC[:DEST]",
        help="extra read-only bind mount",
    )
    _add_name_option(parser)
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="set a variable inside (NAME alone passes the host's value)",
    )
    network_cli.add_options(parser)
    add_relay_options(parser)
    bridge_options.add_options(parser)
    _add_no_daemon_option(parser)


def _add_no_daemon_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-daemon",
        action="store_true",
        help="serve the session from this process even when the user's daemon runs "
        "(docs/daemon.md)",
    )


def _add_name_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--name",
        default=None,
        help="the session's id for sandbridge ls and terminals (default: a random s-XXXXXX)",
    )


def _print_session(entry: SessionEntry) -> None:
    print(app_lines.session(entry.id), file=sys.stderr, flush=True)


def _spec_factory(
    args: argparse.Namespace,
    command: list[str],
    policy: Policy | None = None,
    root: Path | None = None,
    agent: AgentSetup | None = None,
) -> tuple[Callable[[Path], SandboxSpec], Protection]:
    """The spec for each runtime dir, and the session's protected paths (placeholders not
    yet created: :meth:`Protection.create_placeholders` does that, for a real run).
    ``root``: the project root, when the caller has already asked git for it.
    ``agent``: an agent's state binds and credentials (cli/agent_options.py)."""
    workdir = (args.workdir or Path.cwd()).resolve()
    if not workdir.is_dir():
        raise SandbridgeError(f"--workdir {args.workdir}: not a directory")
    mounts = [parse_mount(v, True) for v in args.bind] + [
        parse_mount(v, False) for v in args.ro_bind
    ]
    _distrust_writable(args)
    if root is None or policy is None:
        root, in_git = locate(workdir)
        policy = network_cli.policy(args, workdir, (root, in_git))
    credentials = {} if agent is None else agent.credentials
    env = {
        **policy.sandbox_env(),
        **bridge_options.sandbox_env(args),
        **credentials,
        **parse_env(args.env),
    }
    if policy.mode.value is not NetMode.FULL:
        env[JUPYTER_PATH_ENV] = jupyter_config_path(env.get(JUPYTER_PATH_ENV))
    network = network_cli.sandbox_network(args, policy)
    # Built first, so that a layout exposing sandbridge's own host paths is refused before
    # any session dir exists, and sandbridge's own dirs exist before the protected paths
    # are decided (sandbox/host_paths.py); each session only sets its runtime dir.
    unprotected = SandboxSpec(
        command=command,
        workdir=workdir,
        runtime_dir=Path(MOUNT_POINT),
        home=default_home(),
        mounts=mounts,
        agent_state=() if agent is None else agent.mounts,
        home_source=None if agent is None else agent.home,
        env=env,
        new_session=not stdin_is_terminal(),
        network=network,
    )
    if agent is not None and agent.home is not None:
        # Every bind under the home lands where it says, never through a link the
        # sandbox left in the agent's kept home (its module is an agent's session's alone).
        from sandbridge.agents.state import clear_bind_paths

        clear_bind_paths(
            agent.home, unprotected.home, (layer.mount for layer in unprotected.layers())
        )
    for mount in mounts:
        if mount.source.is_relative_to(root / POLICY_DIR) and mount.source != root / POLICY_DIR:
            # Its view would be the live host path: the secrets file, and what the owner
            # puts there later. The directory itself is shown as everywhere else.
            flag = "--bind" if mount.writable else "--ro-bind"
            raise SandboxError(
                f"{flag} {mount.source}: inside the project's policy directory, of which "
                f"the sandbox sees the policy files alone; bind {root / POLICY_DIR} instead"
            )
    writable = [workdir, *(mount.source for mount in mounts if mount.writable)]
    own = sorted(path for path in installation() if any(path.is_relative_to(w) for w in writable))
    if own:
        _warn(
            f"WARNING: sandbridge runs from {', '.join(map(str, own))}, which the sandbox "
            "could write: read-only inside (install sandbridge outside the project, with "
            "pipx, for the sandbox to write it)"
        )
    protection = protected_paths.decide(
        [Mount(workdir, workdir, writable=True), *mounts],
        root,
        home=_owner_home(),
        protect=[(setting.value, setting.source) for setting in policy.protect],
        own=own,
    )
    template = dataclasses.replace(
        unprotected,
        read_only_paths=protection.mounts,
        # The policy files alone at every view of .sandbridge/: the secrets file and what
        # the owner puts there during the session stay out of sight.
        policy_dir=_policy_dir(root, protection),
        policy_files=shown_policy_files(root),
        other_projects=tuple(known_projects.policy_dirs()),
    )

    def factory(runtime_dir: Path) -> SandboxSpec:
        return dataclasses.replace(template, runtime_dir=runtime_dir)

    return factory, protection


def _policy_dir(root: Path, protection: Protection) -> Path | None:
    """``root/.sandbridge`` if it is a directory, or will be one (a placeholder): a file
    there holds no policy, and a tmpfs needs a directory to lie on."""
    path = root / POLICY_DIR
    if path.is_dir() and not path.is_symlink():
        return path
    if any(p.path == path and p.content is None for p in protection.placeholders):
        return path
    return None


def _owner_home() -> Path | None:
    home = os.environ.get("HOME")
    if not home or not Path(home).is_dir():
        return None
    return Path(home).resolve()


def _writable_binds(args: argparse.Namespace) -> tuple[Path, ...]:
    """The ``--bind`` sources the sandbox writes, resolved (the session passes them over
    on ``PATH``, in a daemon too)."""
    return tuple(Path(os.path.realpath(parse_mount(v, True).source)) for v in args.bind)


def _distrust_writable(args: argparse.Namespace) -> None:
    """Before the first command sandbridge runs on the host (git, to find the project):
    none is ever taken from the workdir or a ``--bind``, which the sandbox writes
    (places/host_commands.py)."""
    workdir = (args.workdir or Path.cwd()).resolve()
    host_commands.distrust([workdir, *_writable_binds(args)])


def cmd_run(args: argparse.Namespace) -> int:
    _distrust_writable(args)
    words = args.command[1:] if args.command[:1] == ["--"] else args.command
    command = agent_options.command(args, words)
    if args.print_policy and not args.dry_run:
        status = network_cli.inspect(args, None, args.backend)
        print("\n".join(bridge_options.policy_lines(args)))
        return status
    if not command:
        raise SandbridgeError(
            "nothing to run: use sandbridge run [options] -- CMD... or --agent NAME"
        )
    if args.dry_run:
        return _dry_run(args, command)
    return _run_session(args, command, _print_app)


def _dry_run(args: argparse.Namespace, command: list[str]) -> int:
    """``--dry-run``: the sandbox's command line (an agent's state prepared as a run would,
    a lockdown's removed again)."""
    workdir = (args.workdir or Path.cwd()).resolve()
    root, in_git = locate(workdir)
    policy = network_cli.policy(args, workdir, (root, in_git))
    with agent_options.session(args, root, workdir, policy, default_home()) as agent:
        factory = _spec_factory(args, command, policy, root, agent)[0]
        return network_cli.inspect(args, factory, args.backend)


def _run_session(
    args: argparse.Namespace, command: list[str], on_register: Callable[[App], None]
) -> int:
    # This process holds the sandbox's environment, the secrets file's values among it; a
    # core file goes to the working directory (core_pattern "core"), the sandbox's to read.
    # The soft limit only: the sandbox inherits it and may raise it for its own processes.
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    ssh_agent = ssh_agent_options.settings_of(args)  # refused before any session dir exists
    clipboard = clipboard_options.settings_of(args)
    containers = containers_options.settings_of(args)
    workdir = (args.workdir or Path.cwd()).resolve()
    root, in_git = locate(workdir)
    policy = network_cli.policy(args, workdir, (root, in_git))
    # Checked before anything is prepared: a limit out of bounds changes nothing.
    settings = dataclasses.replace(relay_settings_of(args, policy), publish_rules=policy.publish)
    # The agent's state binds (a lockdown's removed once the session has ended).
    with agent_options.session(args, root, workdir, policy, default_home()) as agent:
        spec_factory, protection = _spec_factory(args, command, policy, root, agent)
        # After the layout is checked: with the workdir at /, say, no backend is found where
        # the sandbox cannot write, and the layout is what to change (places/host_commands.py).
        backend = resolve(args.backend)
        network_cli.announce(policy)
        unignored = secrets_file_warning(root)
        _warn(unignored)
        known_projects.remember(root)  # every later sandbox hides its .sandbridge/
        with placeholder_lock.held():  # never while an ended session removes them
            protection.create_placeholders()
        try:
            runner: SessionRunner = getattr(args, "session_runner", None) or _serve_here(args)
            return runner(
                spec_factory,
                backend,
                SessionOptions(
                    workdir=workdir,
                    name=args.name,
                    writable=_writable_binds(args),
                    protocol=ForwardingMode.STREAM,
                    settings=settings,
                    on_register=on_register,
                    on_unregister=_print_gone,
                    policy=policy,
                    open_settings=open_settings(args, policy),
                    ssh_agent=ssh_agent,
                    clipboard=clipboard,
                    containers=containers_options.with_shields(
                        containers, protection.mounts, _policy_dir(root, protection)
                    ),
                ),
            )
        finally:
            for warning in protection.finish(keep_placeholders=True):
                _warn(warning)
            if unignored is None:  # ignored at the start: the sandbox may have undone that
                _warn(secrets_file_warning(root))
            _remove_placeholders(protection, getattr(args, "after_exit", None))


def _remove_placeholders(protection: Protection, after_exit: contextlib.ExitStack | None) -> None:
    """Remove the session's unchanged placeholders, unless another live session's workdir
    overlaps them, under the placeholders' lock (places/placeholder_lock.py): here, or with
    ``after_exit`` (a daemon's run builder: it runs that once its client has exited) after,
    the lock taken now: a run started after the client's exit waits for the removal."""
    removal = contextlib.ExitStack()
    held = removal.enter_context(placeholder_lock.held())
    removal.callback(_remove_unshared, protection)
    if held and after_exit is not None:
        after_exit.enter_context(removal)
    else:
        removal.close()


def _remove_unshared(protection: Protection) -> None:
    # Read without creating: the state dirs may have gone with the last session.
    others = [Path(r.workdir) for r in list_sessions()]
    if not protection.shared_with(others):
        protection.remove_placeholders()


# What serves a prepared session and returns its exit status: here (and the daemon's
# host half, if one runs), or the daemon's run builder handing it to a thin client.
SessionRunner = Callable[[Callable[[Path], SandboxSpec], str, SessionOptions], int]


def _served_here(args: argparse.Namespace) -> bool:
    """Whether a session must be served by this process, never the daemon."""
    return bool(args.no_daemon or bridge_options.is_on(args))


def _serve_here(args: argparse.Namespace) -> SessionRunner:
    def serve(
        spec_factory: Callable[[Path], SandboxSpec], backend: str, options: SessionOptions
    ) -> int:
        return event_loop.run(
            run_session(
                spec_factory,
                backend,
                options,
                on_session=_print_session,
                # The daemon never holds the owner's agent or engine socket, nor asks on
                # a terminal before a clipboard read: such a run is served here.
                daemon=None if _served_here(args) else connect_daemon(),
            )
        )

    return serve


def _warn(warning: str | None) -> None:
    if warning is not None:
        print(f"sandbridge: {warning}", file=sys.stderr, flush=True)


def cmd_demo(args: argparse.Namespace) -> int:
    command = [sys.executable, "-m", "sandbridge.demo.app", "--port", str(args.port)]
    if args.base_path != "/":
        command += ["--base-path", args.base_path]
    opened: list[bool] = []

    def announce(app: App) -> None:
        url = app.url
        print(f"\nsandbridge demo: open {url}  (Ctrl-C to stop)\n", flush=True)
        if args.open and not opened:
            import webbrowser

            opened.append(webbrowser.open(url))
            if opened[0]:
                print(f"sandbridge demo: opened {url} in the host browser", flush=True)
            else:
                print("sandbridge demo: no host browser found; open the URL yourself", flush=True)

    return _run_session(args, command, announce)


def cmd_host(args: argparse.Namespace) -> int:
    # The project here is the one a container usually mounts writable (its policy is read
    # with git): no host command is taken from it (places/host_commands.py).
    host_commands.distrust([Path.cwd()])

    async def serve() -> int:
        stopped = event_loop.stop_signals()
        settings = relay_settings_of(args)
        policy = _host_policy(args)
        path = args.runtime_dir.resolve()
        if (why := exposure(path)) is not None:
            raise SandbridgeError(
                f"--runtime-dir {path}: {why}; the container sees all of it: give it a "
                "new directory of its own"
            )
        runtime_dir = RuntimeDir.adopt(path)
        options = SessionOptions(
            workdir=Path.cwd(),
            name=args.name,
            protocol=ForwardingMode(args.protocol),
            settings=settings,
            on_register=_print_app,
            open_settings=open_settings(args),
            policy=policy,
            terminal_socket=True,
            ssh_agent=ssh_agent_options.settings_of(args),
            clipboard=clipboard_options.settings_of(args),
            containers=containers_options.with_shields(
                containers_options.settings_of(args), (), project_root(Path.cwd()) / POLICY_DIR
            ),
        )
        daemon = None if _served_here(args) else connect_daemon()
        async with host_half(daemon, runtime_dir, options) as (entry, stop):
            _print_session(entry)
            print(
                f"sandbridge: serving registrations on {runtime_dir.relay_socket}; for "
                f"terminals (sandbridge shell {entry.id}), run sandbridge shim --terminals inside",
                file=sys.stderr,
                flush=True,
            )
            for line in bridge_options.host_lines(args, runtime_dir.path):
                print(line, file=sys.stderr, flush=True)
            if policy is not None:
                ports = " ".join(f"--gate-port {port}" for port in policy.gate_ports())
                print(
                    f"sandbridge: egress gate on {runtime_dir.path / EGRESS_SOCKET}; inside, run "
                    f"sandbridge shim {ports} and use the proxy http://127.0.0.1:{PROXY_PORT}",
                    file=sys.stderr,
                    flush=True,
                )
            # The owner's stop (control socket, dashboard) ends the host half as SIGTERM
            # does; the container is its runtime's to end.
            async with running(stop.wait()) as (stop_waiter,):
                await first_done(stopped, stop_waiter)  # type: ignore[arg-type]
            if stopped.done():
                return stopped.result()
            _warn(owner_stopped(entry.id))
            return 128 + signal.SIGTERM

    return event_loop.run(serve())


def _host_policy(args: argparse.Namespace) -> Policy | None:
    """``--egress``: the allow-mode policy of the current directory's project and
    ``--allow``, served by an egress gate (docs/external-runtimes.md)."""
    if not args.egress:
        if args.allow:
            raise SandbridgeError("--allow needs --egress: without it there is no egress gate")
        return None
    return load_policy(project_root(Path.cwd()), net=NetMode.ALLOW.value, allow=args.allow)


def add_run(run: argparse.ArgumentParser) -> None:
    """``sandbridge run``'s arguments."""
    _add_sandbox_options(run)
    agent_options.add_options(run)
    add_open_options(run)
    network_cli.add_inspect_options(run)
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    run.set_defaults(func=cmd_run)


def add_demo(demo: argparse.ArgumentParser) -> None:
    """``sandbridge demo``'s arguments."""
    _add_sandbox_options(demo)
    demo.add_argument("--open", action="store_true", help="open the URL in the host browser")
    demo.add_argument("--port", type=int, default=8000, help="the app's port inside the sandbox")
    demo.add_argument("--base-path", default="/", help="register the app under this base path")
    demo.set_defaults(func=cmd_demo)


def add_host(host: argparse.ArgumentParser) -> None:
    """``sandbridge host``'s arguments."""
    host.add_argument(
        "--runtime-dir",
        type=Path,
        required=True,
        help="directory to mount at /run/ags-webview-relay in the sandbox",
    )
    host.add_argument(
        "--protocol",
        choices=[p.value for p in ForwardingMode],
        default="auto",
        help="forwarding protocol the shim speaks (auto: stream, else v1)",
    )
    _add_name_option(host)
    host.add_argument(
        "--egress",
        action="store_true",
        help="serve the egress gate (egress.sock) for the project's .sandbridge/ policy and "
        "--allow; inside, sandbridge shim --gate-port bridges to it",
    )
    host.add_argument(
        "--allow", action="append", default=[], metavar="ENTRY", help="with --egress: allow ENTRY"
    )
    _add_no_daemon_option(host)
    add_relay_options(host)
    bridge_options.add_options(host)
    add_open_options(host)
    host.set_defaults(func=cmd_host)
