"""``sandbridge daemon``: run the user's daemon, or install its systemd units."""

from __future__ import annotations

import argparse
import importlib
import os
import resource
import sys

from sandbridge.aio import event_loop
from sandbridge.daemon import systemd
from sandbridge.daemon.server import run_daemon
from sandbridge.places.systemd_user import WITHOUT_SYSTEMD, user_manager_missing


def add_daemon(daemon: argparse.ArgumentParser) -> None:
    """``sandbridge daemon``'s arguments."""
    daemon.description = (
        "Run the daemon in the foreground; `sandbridge run` uses it when it "
        "runs (unless --no-daemon)."
    )
    daemon.add_argument("-v", "--verbose", action="store_true", help="log debug events")
    # Its standard error is its log (the journal under systemd), not a person's terminal.
    daemon.set_defaults(func=cmd_daemon, stderr_is_log=True)
    actions = daemon.add_subparsers(dest="daemon_action")
    install = actions.add_parser(
        "install", help="write the systemd --user units and say how to enable them"
    )
    install.add_argument(
        "--no-session-check",
        action="store_true",
        help="write the units even without a systemd user session now (one that starts "
        "later: another login, `loginctl enable-linger`)",
    )
    install.set_defaults(func=cmd_install)


def cmd_daemon(args: argparse.Namespace) -> int:
    # The daemon holds every session's private app tokens, the dashboard's cookie, the
    # owner key while it signs a page's approval and each thin client's environment: no
    # core file of it in its working directory (core_pattern "core"), a project's maybe.
    # The soft limit only, as `run` does; the run builder inherits it.
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    inherited = systemd.inherited_socket()
    # The run builder is the command line's to name: the daemon imports no command.
    # -P: never a module of the daemon's working directory (a project's, which a sandbox
    # may write).
    builder = [sys.executable, "-P", "-m", "sandbridge.cli.run_builder"]
    for module in SERVED_AHEAD:
        importlib.import_module(module)
    return event_loop.run(run_daemon(inherited, builder))


# What a session imports where it first uses it (docs/architecture.md, "What a command's
# start imports"), imported by the daemon at its start instead: it serves many sessions for
# a long time, so each of them runs the code the daemon started with (a checkout updated
# meanwhile cannot mix two versions in it), and no session's first app, attach or login
# stalls the event loop every session shares.
SERVED_AHEAD = (
    "sandbridge.relay.listener.app_listener",
    "sandbridge.relay.host.oauth_callback",
    "sandbridge.terminals.attach_server",
    "sandbridge.terminals.approval",
    "sandbridge.places.remotes",
    "sandbridge.egress.gate",
    "sandbridge.egress.log",
    "sandbridge.egress.request_server",
)


def cmd_install(args: argparse.Namespace) -> int:
    # Units no systemd runs would only look installed: say what to run instead.
    why = None if args.no_session_check else user_manager_missing(os.environ)
    if why is not None:
        print(f"sandbridge: no systemd user session ({why}); {WITHOUT_SYSTEMD}", file=sys.stderr)
        return 1
    for path in systemd.install(systemd.unit_dir()):
        print(f"wrote {path}")
    print("enable the daemon (started by the first `sandbridge run`) with:")
    print("  systemctl --user daemon-reload")
    print("  systemctl --user enable --now sandbridge.socket")
    return 0
