"""The ``sandbridge`` command."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import resource
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sandbridge import __version__, log
from sandbridge.aio import event_loop
from sandbridge.cli import network as network_cli
from sandbridge.egress.policy import Policy
from sandbridge.exceptions import SandbridgeError
from sandbridge.places.registry import SessionEntry, list_sessions
from sandbridge.places.runtime_dir import RuntimeDir
from sandbridge.protocol.contract import DEFAULT_UPSTREAM_SOCKET, MOUNT_POINT, UPSTREAM_SOCKET_ENV
from sandbridge.protocol.http.origin_policy import IP_FORM_CAVEAT, UrlForm
from sandbridge.protocol.limits import MAX_APPS_PER_SESSION
from sandbridge.protocol.open_request import ExternalOpens, OpenAction
from sandbridge.protocol.publish_rules import PublishAction
from sandbridge.relay import settings as relay_settings
from sandbridge.relay.app_listener import App
from sandbridge.relay.host_opener import OpenSettings
from sandbridge.relay.settings import RelaySettings
from sandbridge.relay.upstream import ForwardingMode
from sandbridge.sandbox import protected_paths
from sandbridge.sandbox.backend import BACKENDS, resolve
from sandbridge.sandbox.mounts import Mount, parse_mount
from sandbridge.sandbox.project import private_files, project_root, secrets_file_warning
from sandbridge.sandbox.protected_paths import Protection
from sandbridge.sandbox.spec import SandboxSpec, parse_env
from sandbridge.session.lifecycle import SessionOptions, open_session
from sandbridge.session.run import default_home, run_session, stdin_is_terminal


def _print_app(app: App) -> None:
    if app.action is PublishAction.SILENT:
        return  # auto-published, and the owner asked for quiet: sandbridge ls shows it
    if app.host_name != "127.0.0.1":
        # glibc (without nss-myhostname), Python and Node do not resolve *.localhost.
        print(
            f"sandbridge: browsers and curl open the URL below as is; other clients "
            f"connect to 127.0.0.1:{app.host_port} and send Host: "
            f"{app.host_name}:{app.host_port}",
            file=sys.stderr,
            flush=True,
        )
    who = "" if app.process is None else f" ({app.process})"
    print(f"sandbridge: sandbox port {app.port}{who} -> {app.url}", file=sys.stderr, flush=True)


def _print_gone(app: App) -> None:
    """An auto-published app whose socket closed: its host port is closed too."""
    if app.action is PublishAction.SILENT:
        return
    who = "" if app.process is None else f" ({app.process})"
    print(
        f"sandbridge: sandbox port {app.port}{who} stopped listening; host port "
        f"{app.host_port} closed",
        file=sys.stderr,
        flush=True,
    )


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
    _add_relay_options(parser)


def _add_open_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("open requests from the sandbox (docs/open.md)")
    group.add_argument(
        "--open",
        dest="open_action",
        choices=[action.value for action in OpenAction],
        default=None,
        help="what sandbridge-open, $BROWSER and xdg-open inside do: browser (run the "
        "browser command), print (a line to click), ask (on the terminal, else print); "
        "default: open = ... in .sandbridge/config, else browser with DISPLAY or "
        "WAYLAND_DISPLAY set, print without",
    )
    group.add_argument(
        "--browser",
        default=None,
        metavar="CMD",
        help="the browser command, run with the URL as its last argument, without a shell "
        "(default: $BROWSER, else xdg-open)",
    )
    group.add_argument(
        "--open-external",
        choices=[choice.value for choice in ExternalOpens],
        default=ExternalOpens.PRINT.value,
        help="URLs that are not the sandbox's own (https://...): print (default: printed "
        "with a warning, never run) or allow (opened like the sandbox's own)",
    )


def _open_settings(args: argparse.Namespace, policy: Policy | None = None) -> OpenSettings:
    """``--open`` (else the policy's ``open``, else the default), ``--browser``,
    ``--open-external``; ``sandbridge demo`` has none of them."""
    chosen = getattr(args, "open_action", None)
    action = None if chosen is None else OpenAction(chosen)
    if action is None and policy is not None and policy.open_action is not None:
        action = policy.open_action.value
    external = ExternalOpens(getattr(args, "open_external", ExternalOpens.PRINT.value))
    try:
        return OpenSettings.for_host(os.environ, action, getattr(args, "browser", None), external)
    except ValueError as exc:
        raise SandbridgeError(str(exc)) from None


def _add_name_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--name",
        default=None,
        help="the session's id for sandbridge ls and terminals (default: a random s-XXXXXX)",
    )


def _print_session(entry: SessionEntry) -> None:
    print(f"sandbridge: session {entry.id}", file=sys.stderr, flush=True)


def _add_relay_options(parser: argparse.ArgumentParser) -> None:
    limits = parser.add_argument_group("relay limits")
    limits.add_argument(
        "--private",
        action="store_true",
        help="app URLs carry a one-time token exchanged for a cookie; others get 403",
    )
    parser.add_argument(
        "--url-form",
        choices=[form.value for form in UrlForm],
        default=UrlForm.NAME.value,
        help="name (default): each app is http://<random label>.localhost:<port>/, its own "
        "site for cookies and storage; ip: the accepted contract's "
        "http://127.0.0.1:<port>/, where cookies ignore ports: every app, every other "
        "localhost service and any local user's 127.0.0.1 listener share one cookie jar",
    )
    for flag, default, kind, text in (
        (
            "--keepalive-timeout",
            relay_settings.KEEPALIVE_TIMEOUT,
            float,
            "close an idle browser connection after SECONDS",
        ),
        (
            "--header-timeout",
            relay_settings.HEADER_TIMEOUT,
            float,
            "a begun request head must be complete within SECONDS (408)",
        ),
        (
            "--response-timeout",
            relay_settings.RESPONSE_TIMEOUT,
            float,
            "the app must start its response within SECONDS (502)",
        ),
        (
            "--max-connections-per-app",
            relay_settings.MAX_CONNECTIONS_PER_APP,
            int,
            "open browser connections per app (503 past it)",
        ),
        (
            "--max-connections",
            relay_settings.MAX_CONNECTIONS_PER_SESSION,
            int,
            "open browser connections per session (503 past it)",
        ),
        (
            "--app-pool-size",
            relay_settings.POOL_SIZE,
            int,
            "idle app connections kept per app for the next browser connection; 0: none",
        ),
        (
            "--app-pool-idle",
            relay_settings.POOL_IDLE_SECONDS,
            float,
            "close a kept idle app connection after SECONDS",
        ),
        (
            "--max-apps",
            MAX_APPS_PER_SESSION,
            int,
            "registrations per session (refused past it)",
        ),
    ):
        limits.add_argument(flag, type=kind, default=default, help=f"{text} (default {default:g})")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug events")


def _settings(args: argparse.Namespace) -> RelaySettings:
    for name in (
        "keepalive_timeout",
        "header_timeout",
        "response_timeout",
        "max_connections_per_app",
        "max_connections",
        "max_apps",
        "app_pool_idle",
    ):
        if getattr(args, name) <= 0:
            flag = "--" + name.replace("_", "-")
            raise SandbridgeError(f"{flag} must be positive, got {getattr(args, name)}")
    if args.app_pool_size < 0:
        raise SandbridgeError(f"--app-pool-size must be 0 or more, got {args.app_pool_size}")
    url_form = UrlForm(args.url_form)
    if url_form is UrlForm.IP:
        print(f"sandbridge: warning: {IP_FORM_CAVEAT}", file=sys.stderr, flush=True)
    return RelaySettings(
        keepalive_timeout=args.keepalive_timeout,
        header_timeout=args.header_timeout,
        response_timeout=args.response_timeout,
        max_connections_per_app=args.max_connections_per_app,
        max_connections=args.max_connections,
        max_apps=args.max_apps,
        pool_size=args.app_pool_size,
        pool_idle_seconds=args.app_pool_idle,
        private=args.private,
        url_form=url_form,
    )


def _spec_factory(
    args: argparse.Namespace, command: list[str], policy: Policy | None = None
) -> tuple[Callable[[Path], SandboxSpec], Protection]:
    """The spec for each runtime dir, and the session's protected paths (placeholders not
    yet created: :meth:`Protection.create_placeholders` does that, for a real run)."""
    workdir = (args.workdir or Path.cwd()).resolve()
    if not workdir.is_dir():
        raise SandbridgeError(f"--workdir {args.workdir}: not a directory")
    mounts = [parse_mount(v, True) for v in args.bind] + [
        parse_mount(v, False) for v in args.ro_bind
    ]
    policy = network_cli.policy(args, workdir) if policy is None else policy
    env = {**policy.sandbox_env(), **parse_env(args.env)}
    network = network_cli.sandbox_network(args, policy)
    # Built first, so that a layout exposing sandbridge's own host paths is refused before
    # any session dir exists, and sandbridge's own dirs exist before the protected paths
    # are decided (sandbox/host_paths.py); each session only sets its runtime dir.
    unprotected = SandboxSpec(
        # The secrets file and every other file of .sandbridge/ but the policy.
        hidden_files=private_files(project_root(workdir)),
        command=command,
        workdir=workdir,
        runtime_dir=Path(MOUNT_POINT),
        home=default_home(),
        mounts=mounts,
        env=env,
        new_session=not stdin_is_terminal(),
        network=network,
    )
    protection = protected_paths.decide(
        [Mount(workdir, workdir, writable=True), *mounts],
        project_root(workdir),
        home=_owner_home(),
        protect=[(setting.value, setting.source) for setting in policy.protect],
    )
    template = dataclasses.replace(unprotected, read_only_paths=protection.mounts)

    def factory(runtime_dir: Path) -> SandboxSpec:
        return dataclasses.replace(template, runtime_dir=runtime_dir)

    return factory, protection


def _owner_home() -> Path | None:
    home = os.environ.get("HOME")
    if not home or not Path(home).is_dir():
        return None
    return Path(home).resolve()


def cmd_run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.print_policy and not args.dry_run:
        return network_cli.inspect(args, None, args.backend)
    if not command:
        raise SandbridgeError("nothing to run: use sandbridge run [options] -- CMD...")
    if args.dry_run:
        return network_cli.inspect(args, _spec_factory(args, command)[0], args.backend)
    return _run_session(args, command, _print_app)


def _run_session(
    args: argparse.Namespace, command: list[str], on_register: Callable[[App], None]
) -> int:
    backend = resolve(args.backend)
    # This process holds the sandbox's environment, the secrets file's values among it; a
    # core file goes to the working directory (core_pattern "core"), the sandbox's to read.
    # The soft limit only: the sandbox inherits it and may raise it for its own processes.
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    policy = network_cli.policy(args, (args.workdir or Path.cwd()).resolve())
    spec_factory, protection = _spec_factory(args, command, policy)
    network_cli.announce(policy)
    root = project_root((args.workdir or Path.cwd()).resolve())
    unignored = secrets_file_warning(root)
    _warn(unignored)
    protection.create_placeholders()
    try:
        return event_loop.run(
            run_session(
                spec_factory,
                backend,
                SessionOptions(
                    workdir=(args.workdir or Path.cwd()).resolve(),
                    name=args.name,
                    protocol=ForwardingMode.STREAM,
                    settings=dataclasses.replace(_settings(args), publish_rules=policy.publish),
                    on_register=on_register,
                    on_unregister=_print_gone,
                    policy=policy,
                    open_settings=_open_settings(args, policy),
                ),
                on_session=_print_session,
            )
        )
    finally:
        # Read without creating: the state dirs may have gone with the last session.
        others = [Path(r.workdir) for r in list_sessions()]
        for warning in protection.finish(keep_placeholders=protection.shared_with(others)):
            _warn(warning)
        if unignored is None:  # ignored at the start: the sandbox may have undone that
            _warn(secrets_file_warning(root))


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


async def _until_signalled() -> int:
    """Wait for SIGINT or SIGTERM; return the conventional exit status for it."""
    loop = asyncio.get_running_loop()
    received: asyncio.Future[int] = loop.create_future()

    def on_signal(signum: int) -> None:
        if not received.done():
            received.set_result(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    return 128 + await received


def cmd_host(args: argparse.Namespace) -> int:
    async def serve() -> int:
        settings = _settings(args)
        runtime_dir = RuntimeDir.adopt(args.runtime_dir.resolve())
        options = SessionOptions(
            workdir=Path.cwd(),
            name=args.name,
            protocol=ForwardingMode(args.protocol),
            settings=settings,
            on_register=_print_app,
            open_settings=_open_settings(args),
        )
        async with open_session(runtime_dir, options) as session:
            _print_session(session.entry)
            print(
                f"sandbridge: serving registrations on {runtime_dir.relay_socket}",
                file=sys.stderr,
                flush=True,
            )
            return await _until_signalled()

    return event_loop.run(serve())


def cmd_ls(args: argparse.Namespace) -> int:
    sessions = list_sessions()
    if args.json:
        print(json.dumps([record.to_json() for record in sessions], indent=2))
        return 0
    if not sessions:
        print("no running sessions")
        return 0
    for record in sessions:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.started))
        print(f"{record.id}  pid {record.pid}  since {started}  {record.workdir}")
        for app in record.apps:
            private = "  (private)" if app.private else ""
            who = "" if app.process is None else f" ({app.process})"
            print(f"  port {app.port}{who} -> {app.url}{private}")
    return 0


def cmd_shim(args: argparse.Namespace) -> int:
    from sandbridge.relay.shim import Shim

    async def serve() -> int:
        shim = Shim(Path(args.socket))
        await shim.start()
        print(f"sandbridge: shim listening on {args.socket}", file=sys.stderr, flush=True)
        try:
            return await _until_signalled()
        finally:
            await shim.close()

    return event_loop.run(serve())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandbridge", description="Narrow, audited bridges across a Linux sandbox boundary."
    )
    parser.add_argument("--version", action="version", version=f"sandbridge {__version__}")
    commands = parser.add_subparsers(dest="subcommand", required=True)

    run = commands.add_parser("run", help="run a command in a sandbox with an app relay")
    _add_sandbox_options(run)
    _add_open_options(run)
    network_cli.add_inspect_options(run)
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    run.set_defaults(func=cmd_run)

    demo = commands.add_parser("demo", help="serve the bundled demo app from a sandbox")
    _add_sandbox_options(demo)
    demo.add_argument("--open", action="store_true", help="open the URL in the host browser")
    demo.add_argument("--port", type=int, default=8000, help="the app's port inside the sandbox")
    demo.add_argument("--base-path", default="/", help="register the app under this base path")
    demo.set_defaults(func=cmd_demo)

    host = commands.add_parser(
        "host", help="serve the relay for a sandbox another runtime starts (podman, docker)"
    )
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
    _add_relay_options(host)
    _add_open_options(host)
    host.set_defaults(func=cmd_host)

    ls = commands.add_parser("ls", help="list running sessions and their apps")
    ls.add_argument("--json", action="store_true", help="print JSON for scripts")
    ls.set_defaults(func=cmd_ls)

    network_cli.add_status_command(commands)

    shim = commands.add_parser("shim", help="run the shim inside a sandbox another runtime starts")
    shim.add_argument(
        "--socket",
        default=os.environ.get(UPSTREAM_SOCKET_ENV, DEFAULT_UPSTREAM_SOCKET),
        help="where to listen (default: $AGS_WEBVIEW_RELAY_UPSTREAM_SOCKET)",
    )
    shim.add_argument("-v", "--verbose", action="store_true", help="log debug events")
    shim.set_defaults(func=cmd_shim)

    from sandbridge.cli import egress as egress_cli
    from sandbridge.cli import policy as policy_cli
    from sandbridge.cli.terminal import add_commands

    policy_cli.add_commands(commands)
    add_commands(commands)
    egress_cli.add_commands(commands)
    return parser


def _raise_descriptor_limit() -> None:
    """Use the hard limit of open files: every relayed connection takes two."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _raise_descriptor_limit()
    log.setup(verbose=getattr(args, "verbose", False))
    try:
        return int(args.func(args))
    except SandbridgeError as exc:
        print(f"sandbridge: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
