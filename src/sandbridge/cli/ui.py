"""``sandbridge ui``: the owner's dashboard. The user's daemon serves it when one runs
(this asks it for a one-time URL and returns); without one, this process serves it in the
foreground until Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import signal
import subprocess
import sys

from sandbridge.aio import event_loop
from sandbridge.daemon.dashboard import ask_url
from sandbridge.exceptions import SandbridgeError
from sandbridge.protocol.open_request import OpenAction
from sandbridge.relay.host.open_settings import OpenSettings
from sandbridge.session.served import connect
from sandbridge.ui.server import build_dashboard


def _say(text: str) -> None:
    print(f"sandbridge: {text}", file=sys.stderr, flush=True)


def _open_in_browser(url: str, browser: str | None) -> bool:
    """Start the owner's browser command on ``url`` as ``sandbridge run`` opens a URL
    (``--browser``, else ``$BROWSER``, else ``xdg-open``; needs a desktop session)."""
    try:
        settings = OpenSettings.for_host(os.environ, browser=browser)
    except ValueError as exc:
        raise SandbridgeError(str(exc)) from None
    if settings.action is not OpenAction.BROWSER:
        return False
    argv = [*settings.browser, url]
    try:
        subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        _say(f"cannot run the browser command {argv[0]!r}: {exc.strerror}")
        return False
    return True


async def _serve(args: argparse.Namespace) -> int:
    # This process holds the dashboard's cookie and signs the page's approvals with the
    # owner key: no core file of it in its working directory (core_pattern "core"), a
    # project's maybe. The soft limit only, as `run` does.
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    dashboard = build_dashboard()
    await dashboard.start()
    try:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        # Before the URL is shown: whoever reads it may stop this process at once.
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        _show(dashboard.login_url(), args, f"served on 127.0.0.1:{dashboard.port}; Ctrl-C stops it")
        await stop.wait()
    finally:
        await dashboard.close()
    return 0


def _show(url: str, args: argparse.Namespace, where: str) -> None:
    """Open ``url`` in the browser or print it; say who serves it (``where``)."""
    if args.print_url or not _open_in_browser(url, args.browser):
        print(url, flush=True)  # stdout: a script can read it; the link works once
        _say(f"dashboard: open the URL above (it works once, within 2 minutes); {where}")
    else:
        _say(f"dashboard opened in the browser; {where}")


def _check_browser(browser: str | None) -> None:
    """``--browser CMD``: its program must be one (on ``PATH``, or at the path given)
    before anything starts; a typo would otherwise only print the URL in its place."""
    if browser is None:
        return
    try:
        program = OpenSettings.for_host(os.environ, browser=browser).browser[0]
    except ValueError as exc:
        raise SandbridgeError(str(exc)) from None
    if shutil.which(program) is None:
        where = "no such executable" if "/" in program else "not found on PATH"
        raise SandbridgeError(
            f"--browser {browser!r}: {where}; give a browser command that is installed "
            "(e.g. firefox), or --print-url"
        )


def cmd_ui(args: argparse.Namespace) -> int:
    _check_browser(args.browser)
    daemon = None if args.no_daemon else connect()
    if daemon is None:
        if not args.no_daemon:
            _say("no daemon runs: this process serves the dashboard until Ctrl-C")
        return int(event_loop.run(_serve(args)))
    with daemon:
        url = ask_url(daemon)
    _show(url, args, "the daemon serves it")
    return 0


def add_ui(ui: argparse.ArgumentParser) -> None:
    """``sandbridge ui``'s arguments."""
    ui.add_argument(
        "--print-url", action="store_true", help="print the one-time URL instead of opening it"
    )
    ui.add_argument("--browser", default=None, help="browser command (default: $BROWSER, xdg-open)")
    ui.add_argument(
        "--no-daemon",
        action="store_true",
        help="serve the dashboard from this process even when the daemon runs",
    )
    ui.set_defaults(func=cmd_ui)
