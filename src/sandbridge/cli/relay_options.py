"""The relay's and the open service's options of ``sandbridge run`` and ``sandbridge host``:
the flags, and the settings they make with the project's policy."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from sandbridge.exceptions import PolicyError, SandbridgeError
from sandbridge.project.owner_config import OwnerConfig, read_owner_config
from sandbridge.project.policy import Policy
from sandbridge.project.setting import DEFAULT, Setting
from sandbridge.protocol.http.origin_policy import IP_FORM_CAVEAT, UrlForm
from sandbridge.protocol.open_request import ExternalOpens, OpenAction
from sandbridge.protocol.relay_settings import LIMITS, Limit, checked
from sandbridge.relay.host.open_settings import CALLBACK_DEADLINE, OpenSettings
from sandbridge.relay.host.settings import RelaySettings


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
    group.add_argument(
        "--oauth-callbacks",
        action="store_true",
        default=None,
        help="carry a login's callback: when an approved external open names a loopback "
        "redirect_uri (http://127.0.0.1:PORT/...), await that one request on the host's "
        "PORT and pass it to the sandbox's (default: oauth_callbacks = on|off in the "
        "owner's ~/.config/sandbridge/config, else off)",
    )
    group.add_argument(
        "--oauth-callback-deadline",
        type=float,
        default=CALLBACK_DEADLINE,
        metavar="SECONDS",
        help=f"how long a login's callback is awaited (default {CALLBACK_DEADLINE:g})",
    )


def _owner_config() -> OwnerConfig:
    try:
        return read_owner_config(os.environ)
    except PolicyError as exc:
        raise SandbridgeError(str(exc)) from None


def oauth_callbacks_setting(args: argparse.Namespace, owner: OwnerConfig) -> Setting[bool]:
    """``--oauth-callbacks``, else the owner's ``oauth_callbacks``, else off: never the
    project's (a repository cannot turn a bridge on)."""
    if getattr(args, "oauth_callbacks", None):
        return Setting(True, "--oauth-callbacks")
    return owner.oauth_callbacks or Setting(False, DEFAULT)


def describe_bridges(args: argparse.Namespace) -> list[str]:
    """``--print-policy``'s lines for the owner's bridges, each with its source."""
    owner = _owner_config()
    switch = oauth_callbacks_setting(args, owner)
    lines = [
        f"{'oauth_callbacks = ' + ('on' if switch.value else 'off'):<52} ({switch.source})",
        f"{'open-external = ' + getattr(args, 'open_external', 'print'):<52} (--open-external)",
    ]
    if switch.value:
        deadline = getattr(args, "oauth_callback_deadline", CALLBACK_DEADLINE)
        lines.append(f"  a login's callback is awaited once, for {deadline:g} s")
    for allowed in owner.open_external_allow:
        lines.append(f"{'open_external_allow = ' + allowed.value:<52} ({allowed.source})")
    return lines


def open_settings(args: argparse.Namespace, policy: Policy | None = None) -> OpenSettings:
    """``--open`` (else the policy's ``open``, else the default), ``--browser``,
    ``--open-external``, and the OAuth callback bridge (its flags, else the owner's
    config); ``sandbridge demo`` has none of them."""
    chosen = getattr(args, "open_action", None)
    action = None if chosen is None else OpenAction(chosen)
    if action is None and policy is not None and policy.open_action is not None:
        action = policy.open_action.value
    external = ExternalOpens(getattr(args, "open_external", ExternalOpens.PRINT.value))
    owner = _owner_config()
    deadline = getattr(args, "oauth_callback_deadline", CALLBACK_DEADLINE)
    if not deadline > 0:
        raise SandbridgeError(f"--oauth-callback-deadline must be positive, got {deadline:g}")
    try:
        settings = OpenSettings.for_host(
            os.environ, action, getattr(args, "browser", None), external
        )
    except ValueError as exc:
        raise SandbridgeError(str(exc)) from None
    return dataclasses.replace(
        settings,
        oauth_callbacks=oauth_callbacks_setting(args, owner).value,
        allowed_hosts=owner.allowed_hosts(),
        callback_deadline=deadline,
    )


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
        "C front door, and WebSockets from the event loop, not the C tunnel thread "
        "(docs/relay.md, 'The front door', 'The tunnel thread')",
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
    for limit in LIMITS:
        limits.add_argument(
            limit.flag,
            type=limit.kind,
            default=limit.default,
            metavar="SECONDS" if limit.kind is float else "N",
            help=f"{limit.doc} (default {limit.text(limit.default)}; {limit.bounds})",
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
    """The relay's settings from the flags (each checked against its declaration, the
    error naming the flag) and the policy's ``url_form``."""
    try:
        limits = checked({limit.flag: getattr(args, limit.dest) for limit in LIMITS}, _flag)
    except ValueError as exc:
        raise SandbridgeError(str(exc)) from None
    url_form = url_form_of(args, policy)
    return RelaySettings(
        **limits,
        front_door=args.front_door,
        private=args.private,
        url_form=url_form,
    )


def _flag(limit: Limit[float] | Limit[int]) -> str:
    return limit.flag
