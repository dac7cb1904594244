"""The relay's and the open service's options of ``sandbridge run`` and ``sandbridge host``:
the flags, and the settings they make with the project's policy."""

from __future__ import annotations

import argparse
import os
import sys

from sandbridge.exceptions import SandbridgeError
from sandbridge.project.policy import Policy
from sandbridge.protocol.http.origin_policy import IP_FORM_CAVEAT, UrlForm
from sandbridge.protocol.limits import MAX_APPS_PER_SESSION
from sandbridge.protocol.open_request import ExternalOpens, OpenAction
from sandbridge.relay import settings as relay_settings
from sandbridge.relay.host_opener import OpenSettings
from sandbridge.relay.settings import RelaySettings


def add_open_options(parser: argparse.ArgumentParser) -> None:
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


def open_settings(args: argparse.Namespace, policy: Policy | None = None) -> OpenSettings:
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


def add_relay_options(parser: argparse.ArgumentParser) -> None:
    served = parser.add_argument_group("how apps are served")
    served.add_argument(
        "--private",
        action="store_true",
        help="app URLs carry a one-time token exchanged for a cookie; others get 403",
    )
    served.add_argument(
        "--no-front-door",
        dest="front_door",
        action="store_false",
        help="serve new browser connections from the relay's Python only, not first from its "
        "C front door (docs/relay.md, 'The front door')",
    )
    served.add_argument(
        "--url-form",
        choices=[form.value for form in UrlForm],
        default=None,
        help="name (the default, unless url_form = ... in .sandbridge/config says "
        "otherwise): each app is http://<random label>.localhost:<port>/, its own "
        "site for cookies and storage; ip: the accepted contract's "
        "http://127.0.0.1:<port>/, where cookies ignore ports: every app, every other "
        "localhost service and any local user's 127.0.0.1 listener share one cookie jar",
    )
    limits = parser.add_argument_group("relay limits")
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
            "the app must start its response within SECONDS (502); a browser that takes "
            "nothing of a response for SECONDS is dropped",
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
        limits.add_argument(
            flag,
            type=kind,
            default=default,
            metavar="SECONDS" if kind is float else "N",
            help=f"{text} (default {default:g})",
        )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print the session's events as key=value lines, debug events included",
    )


def url_form_of(args: argparse.Namespace, policy: Policy | None) -> UrlForm:
    """``--url-form``, else the policy's ``url_form``, else ``name``; the IP form's caveat
    is said where it is chosen."""
    if args.url_form is not None:
        form, caveat = UrlForm(args.url_form), IP_FORM_CAVEAT
    elif policy is not None and policy.url_form is not None:
        form = policy.url_form.value
        caveat = f"url_form = ip ({policy.url_form.source}): " + IP_FORM_CAVEAT.removeprefix(
            "--url-form ip: "
        )
    else:
        return UrlForm.NAME
    if form is UrlForm.IP:
        print(f"sandbridge: warning: {caveat}", file=sys.stderr, flush=True)
    return form


def relay_settings_of(args: argparse.Namespace, policy: Policy | None = None) -> RelaySettings:
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
    url_form = url_form_of(args, policy)
    return RelaySettings(
        keepalive_timeout=args.keepalive_timeout,
        header_timeout=args.header_timeout,
        response_timeout=args.response_timeout,
        max_connections_per_app=args.max_connections_per_app,
        max_connections=args.max_connections,
        max_apps=args.max_apps,
        pool_size=args.app_pool_size,
        pool_idle_seconds=args.app_pool_idle,
        front_door=args.front_door,
        private=args.private,
        url_form=url_form,
    )
