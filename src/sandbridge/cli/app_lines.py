"""What ``run`` prints of an app, from the fields the daemon's ``app`` and ``gone``
events carry (``dataclasses.asdict`` of :class:`~sandbridge.relay.host.app.App`, the action
by its value): shared by the full command and the thin client, which loads no more
than the standard library (``thin_run.py``)."""

from __future__ import annotations

from collections.abc import Mapping

# PublishAction.SILENT's value: auto-published, and the owner asked for quiet.
SILENT = "silent"


def registered(app: Mapping[str, object]) -> list[str]:
    """The lines for an app that registered (none for a silent one: ``ls`` shows it)."""
    if app["action"] == SILENT:
        return []
    lines = []
    if app["host_name"] != "127.0.0.1":
        # glibc (without nss-myhostname), Python and Node do not resolve *.localhost.
        lines.append(
            f"sandbridge: browsers and curl open the URL below as is; other clients "
            f"connect to 127.0.0.1:{app['host_port']} and send Host: "
            f"{app['host_name']}:{app['host_port']}"
        )
    lines.append(f"sandbridge: sandbox port {app['port']}{_who(app)} -> {app['url']}")
    return lines


def gone(app: Mapping[str, object]) -> list[str]:
    """The line for an auto-published app whose socket closed: its host port is closed
    too."""
    if app["action"] == SILENT:
        return []
    return [
        f"sandbridge: sandbox port {app['port']}{_who(app)} stopped listening; host port "
        f"{app['host_port']} closed"
    ]


def session(session_id: str) -> str:
    return f"sandbridge: session {session_id}"


def _who(app: Mapping[str, object]) -> str:
    return "" if app["process"] is None else f" ({app['process']})"
