"""How a session carries out the sandbox's open requests (docs/open.md): the owner's
choices, as the command line, the owner's config and the daemon's wire give them.

Plain settings, apart from the machinery that serves them (``host_opener.py``, and the
OAuth callbacks under it): a module that reads or declares these options imports this
one alone.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from sandbridge.protocol.open_request import ExternalOpens, OpenAction

# What runs a URL when neither --browser nor $BROWSER names a command.
DEFAULT_BROWSER = "xdg-open"
# How long the host awaits a login's callback after the owner approved its open: a
# person reads the provider's page, signs in, maybe does a second factor. After this
# the port is closed and a late callback finds nothing listening.
CALLBACK_DEADLINE = 600.0


@dataclass(frozen=True, slots=True)
class OpenSettings:
    """How open requests are carried out in one session."""

    action: OpenAction = OpenAction.PRINT
    browser: tuple[str, ...] = (DEFAULT_BROWSER,)
    external: ExternalOpens = ExternalOpens.PRINT
    # The OAuth callback bridge (--oauth-callbacks, oauth_callbacks = on in the owner's
    # config): an approved external open's loopback redirect_uri is awaited on the host.
    oauth_callbacks: bool = False
    # The owner's open_external_allow names: external URLs to them are approved, unasked.
    allowed_hosts: tuple[str, ...] = ()
    # How long a callback is awaited (--oauth-callback-deadline).
    callback_deadline: float = CALLBACK_DEADLINE

    @classmethod
    def for_host(
        cls,
        environ: Mapping[str, str],
        action: OpenAction | None = None,
        browser: str | None = None,
        external: ExternalOpens = ExternalOpens.PRINT,
    ) -> OpenSettings:
        """The owner's choices, else: ``browser`` with a desktop session (DISPLAY or
        WAYLAND_DISPLAY set), ``print`` without; ``--browser``, else the first command
        of ``$BROWSER``, else ``xdg-open``."""
        if action is None:
            desktop = environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY")
            action = OpenAction.BROWSER if desktop else OpenAction.PRINT
        source = "--browser"
        if browser is None:
            source = "$BROWSER"
            browser = (environ.get("BROWSER") or "").split(os.pathsep)[0].strip()
            if not browser:
                source, browser = "default", DEFAULT_BROWSER
        try:
            argv = tuple(shlex.split(browser))
        except ValueError as exc:
            raise ValueError(f"the browser command ({source}) {browser!r}: {exc}") from None
        if not argv:
            raise ValueError(f"the browser command ({source}) {browser!r} is empty")
        return cls(action, argv, external)
