"""How the host carries out open requests: the decision, the rate limit, the defaults."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from pathlib import Path

import pytest

from sandbridge.places import host_commands
from sandbridge.protocol.open_request import ExternalOpens, OpenAction
from sandbridge.relay.host_opener import HostOpener, OpenSettings, Outcome, decide

B, P, A = OpenAction.BROWSER, OpenAction.PRINT, OpenAction.ASK


@pytest.mark.parametrize(
    ("action", "external_opens", "external", "browsable", "terminal", "expected"),
    [
        (B, ExternalOpens.PRINT, False, True, False, Outcome.BROWSER),
        (B, ExternalOpens.PRINT, True, True, True, Outcome.PRINT),
        (B, ExternalOpens.ALLOW, True, True, False, Outcome.BROWSER),
        (B, ExternalOpens.PRINT, False, False, False, Outcome.PRINT),  # a ws:// URL
        (P, ExternalOpens.ALLOW, True, True, True, Outcome.PRINT),
        (P, ExternalOpens.PRINT, False, True, True, Outcome.PRINT),
        (A, ExternalOpens.PRINT, False, True, True, Outcome.ASK),
        (A, ExternalOpens.PRINT, False, True, False, Outcome.PRINT),
        (A, ExternalOpens.PRINT, True, True, True, Outcome.PRINT),
        (A, ExternalOpens.ALLOW, True, True, True, Outcome.ASK),
    ],
)
def test_decision(
    action: OpenAction,
    external_opens: ExternalOpens,
    external: bool,
    browsable: bool,
    terminal: bool,
    expected: Outcome,
) -> None:
    settings = OpenSettings(action, ("xdg-open",), external_opens)
    assert decide(settings, external=external, browsable=browsable, terminal=terminal) is expected


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, OpenAction.PRINT),
        ({"DISPLAY": ":0"}, OpenAction.BROWSER),
        ({"WAYLAND_DISPLAY": "wayland-0"}, OpenAction.BROWSER),
        ({"DISPLAY": ""}, OpenAction.PRINT),
    ],
)
def test_default_action_is_browser_with_a_desktop_session_only(
    environ: dict[str, str], expected: OpenAction
) -> None:
    assert OpenSettings.for_host(environ).action is expected


@pytest.mark.parametrize(
    ("environ", "browser", "expected"),
    [
        ({}, None, ("xdg-open",)),
        ({"BROWSER": "firefox --new-tab"}, None, ("firefox", "--new-tab")),
        ({"BROWSER": "w3m:lynx"}, None, ("w3m",)),
        ({"BROWSER": "firefox"}, "'/opt/my browser/run' -x", ("/opt/my browser/run", "-x")),
    ],
)
def test_browser_command_is_the_flag_else_browser_else_xdg_open(
    environ: dict[str, str], browser: str | None, expected: tuple[str, ...]
) -> None:
    assert OpenSettings.for_host(environ, browser=browser).browser == expected


def test_empty_browser_command_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        OpenSettings.for_host({}, browser="  ")


def test_ask_is_printed_for_the_daemons_client_though_the_daemon_has_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A foreground daemon has a terminal, but not the owner of the session it serves:
    # its messages go to the session's client, and an open request there is printed
    # (it used to be asked on the daemon's terminal, for any session's sandbox).
    out = io.StringIO()

    async def scenario() -> Outcome:
        opener = HostOpener(OpenSettings(A, ("xdg-open",), ExternalOpens.PRINT), out)
        try:
            return opener.open("http://app.localhost:1234/", browsable=True)
        finally:
            await opener.close()  # a question still open is withdrawn

    primary, secondary = os.openpty()
    with os.fdopen(secondary, "r") as tty:
        monkeypatch.setattr(sys, "stdin", tty)
        outcome = asyncio.run(scenario())
    os.close(primary)
    assert outcome is Outcome.PRINT
    assert "the sandbox opens http://app.localhost:1234/" in out.getvalue()


def test_a_browser_command_the_sandbox_could_have_written_is_never_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner's PATH names a directory of the workdir (an active virtualenv): a
    browser command the sandbox put there ran on the host when it asked to open a URL."""
    workdir, marker = tmp_path / "proj", tmp_path / "planted-browser-ran"
    bin_dir = workdir / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    planted = bin_dir / "the-browser"  # found nowhere else on PATH
    planted.write_text(f"#!/bin/sh\ntouch {marker}\n")
    planted.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(host_commands, "_distrusted", set())
    host_commands.distrust([workdir])
    out = io.StringIO()

    async def scenario() -> Outcome:
        opener = HostOpener(OpenSettings(B, ("the-browser",), ExternalOpens.PRINT), out)
        try:
            return opener.open("http://app.localhost:1234/", browsable=True)
        finally:
            await opener.close()  # waits for the browser command it started

    assert asyncio.run(scenario()) is Outcome.BROWSER
    assert not marker.exists(), "the sandbox's browser command ran on the host"
    assert (
        "cannot run the browser command 'the-browser': not found on PATH outside the places "
        "the sandbox can write; open http://app.localhost:1234/"
    ) in out.getvalue()
