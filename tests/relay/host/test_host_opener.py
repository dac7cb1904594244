"""How the host carries out open requests: the decision, the rate limit, the defaults."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbridge.places import host_commands
from sandbridge.protocol.open_request import ExternalOpens, OpenAction
from sandbridge.relay.host.host_opener import HostOpener, Outcome, decide
from sandbridge.relay.host.open_settings import OpenSettings

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


def test_an_allowed_authorize_host_is_opened_without_a_question_others_printed() -> None:
    out = io.StringIO()
    settings = OpenSettings(B, ("true",), ExternalOpens.PRINT, allowed_hosts=("*.example.com",))

    async def scenario() -> tuple[Outcome, Outcome]:
        opener = HostOpener(settings, out)
        try:
            allowed = opener.open("https://auth.example.com/authorize?x=1", external=True)
            other = opener.open("https://evil.example/authorize", external=True)
            return allowed, other
        finally:
            await opener.close()

    assert asyncio.run(scenario()) == (Outcome.BROWSER, Outcome.PRINT)
    said = out.getvalue()
    assert (
        "the sandbox opens https://auth.example.com/authorize?x=1 (with true) "
        "(open_external_allow = *.example.com)"
    ) in said
    assert "WARNING: the sandbox asks to open an external URL; not opened" in said


# The owner's browser, reduced to what matters here: it follows the authorize page's
# redirect to the redirect_uri (with a code), and writes what it got to a file.
FOLLOWING_BROWSER = """
import sys, urllib.parse, urllib.request
query = urllib.parse.parse_qs(urllib.parse.urlsplit(sys.argv[-1]).query)
with urllib.request.urlopen(query["redirect_uri"][0] + "?code=c0de", timeout=20) as answer:
    open(sys.argv[1], "wb").write(answer.read())
"""


def test_an_approved_login_awaits_its_callback_before_the_browser_runs(tmp_path: Path) -> None:
    from tests.conftest import free_port
    from tests.relay.host.test_oauth_callback import LOGIN_PAGE, SandboxLogin

    port, got = free_port(), tmp_path / "browser-got"
    browser = (sys.executable, "-c", FOLLOWING_BROWSER, str(got))
    settings = OpenSettings(B, browser, ExternalOpens.ALLOW, oauth_callbacks=True)
    url = f"https://auth.example.com/authorize?redirect_uri=http://127.0.0.1:{port}/cb"
    out = io.StringIO()

    async def scenario() -> list[bytes]:
        async with SandboxLogin(tmp_path / "login.sock") as login:
            opener = HostOpener(settings, out)
            opener.callbacks.open_sandbox = login.opener()
            try:
                assert opener.open(url, external=True) is Outcome.BROWSER
            finally:
                await opener.close()  # waits for the browser command
            return login.requests

    (request,) = asyncio.run(scenario())
    assert request.startswith(b"GET /cb?code=c0de HTTP/1.1\r\n")
    assert got.read_bytes() == LOGIN_PAGE
    said = out.getvalue()
    assert f"the login's callback to http://127.0.0.1:{port}/cb is awaited on the host" in said
    assert f"the login's callback on port {port}: relayed" in said


def test_a_login_whose_port_is_taken_on_the_host_is_printed_not_opened(tmp_path: Path) -> None:
    import socket

    marker = tmp_path / "browser-ran"
    out = io.StringIO()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        settings = OpenSettings(
            B, ("touch", str(marker)), ExternalOpens.ALLOW, oauth_callbacks=True
        )
        url = f"https://auth.example.com/a?redirect_uri=http%3A%2F%2F127.0.0.1%3A{port}%2Fcb"

        async def scenario() -> Outcome:
            opener = HostOpener(settings, out)
            opener.callbacks.open_sandbox = _never_opened
            try:
                return opener.open(url, external=True)
            finally:
                await opener.close()

        assert asyncio.run(scenario()) is Outcome.PRINT
    assert not marker.exists()
    assert (
        f"WARNING: port {port} is taken on the host (Address already in use), so the login's "
        f"callback to http://127.0.0.1:{port}/cb cannot be carried, and the login page is not "
        f"opened (the code would go to whatever listens there); free the port, or open it "
        f"yourself: {url}"
    ) in out.getvalue()


async def _never_opened(port: int) -> None:
    raise AssertionError(f"port {port} was opened")


def test_without_the_bridge_a_login_open_takes_no_host_port() -> None:
    import socket

    from tests.conftest import free_port

    port = free_port()
    url = f"https://auth.example.com/a?redirect_uri=http://127.0.0.1:{port}/cb"
    settings = OpenSettings(P, ("true",), ExternalOpens.ALLOW)  # oauth_callbacks off

    async def scenario() -> Outcome:
        opener = HostOpener(settings, io.StringIO())
        opener.callbacks.open_sandbox = _never_opened
        try:
            outcome = opener.open(url, external=True)
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port)).close()
            return outcome
        finally:
            await opener.close()

    assert asyncio.run(scenario()) is Outcome.PRINT


def test_a_loose_redirect_uri_is_refused_to_the_sandbox_with_the_bridge_on() -> None:
    from sandbridge.exceptions import RegistrationError

    settings = OpenSettings(P, ("true",), ExternalOpens.ALLOW, oauth_callbacks=True)
    url = "https://auth.example.com/a?redirect_uri=http://127.0.0.1:80/cb"

    async def scenario() -> None:
        opener = HostOpener(settings, io.StringIO())
        opener.callbacks.open_sandbox = _never_opened
        try:
            with pytest.raises(RegistrationError, match=r"port must be 1024\.\.65535"):
                opener.open(url, external=True)
        finally:
            await opener.close()

    asyncio.run(scenario())


def test_past_the_callbacks_awaited_at_once_a_login_is_printed_not_opened() -> None:
    from sandbridge.relay.host.login_callbacks import MAX_CALLBACKS
    from tests.conftest import free_port

    out = io.StringIO()
    settings = OpenSettings(P, ("true",), ExternalOpens.ALLOW, oauth_callbacks=True)
    urls = [
        f"https://auth.example.com/a?redirect_uri=http://127.0.0.1:{free_port()}/cb"
        for _ in range(MAX_CALLBACKS + 1)
    ]

    async def scenario() -> list[Outcome]:
        opener = HostOpener(settings, out)
        opener.callbacks.open_sandbox = _never_opened
        try:
            return [opener.open(url, external=True) for url in urls]
        finally:
            await opener.close()

    assert asyncio.run(scenario()) == [Outcome.PRINT] * (MAX_CALLBACKS + 1)
    said = out.getvalue()
    assert said.count("is awaited on the host, once") == MAX_CALLBACKS
    assert (
        f"WARNING: {MAX_CALLBACKS} logins' callbacks are awaited already; the one to "
        f"{urls[-1].split('=', 1)[1]} is not, and its login page is not opened: {urls[-1]}"
    ) in said
    assert f"the sandbox opens {urls[-1]}" not in said


def test_an_open_question_waits_its_turn_behind_a_bridge_s_on_the_one_terminal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The session's bridges and ``--open ask`` share its questions: the owner's line
    answers the question on the screen, never one asked beside it (each read the terminal
    on its own, and a "y" meant for one could answer the other). The opener's question
    is asked only once the first is answered, and listed for the dashboard meanwhile."""
    from sandbridge.aio.owner_questions import OwnerQuestions, Verdict

    main, replica = os.openpty()  # stdin a real terminal: --open ask asks
    monkeypatch.setattr(sys, "stdin", open(replica, closefd=True))  # noqa: SIM115
    settings = OpenSettings(A, (str(tmp_path / "no-such-browser"),), ExternalOpens.PRINT)

    async def scenario() -> tuple[list[str], Verdict]:
        asked: list[str] = []
        first_read = asyncio.Event()
        owner_reads_the_first = asyncio.Event()

        async def terminal(prompt: str) -> bool:
            asked.append(prompt)
            if len(asked) == 1:
                first_read.set()
                await owner_reads_the_first.wait()
                return False
            return False

        questions = OwnerQuestions(terminal, listed=True)
        changed = asyncio.Event()
        questions.on_change = changed.set

        async def until(condition: Callable[[], bool]) -> None:
            while not condition():
                changed.clear()
                await changed.wait()

        opener = HostOpener(settings, None, questions)
        try:
            bridge = asyncio.create_task(
                questions.ask("clipboard", "the sandbox asks to read", "allow?")
            )
            await first_read.wait()
            assert opener.open("http://localhost:8000/") is Outcome.ASK
            await until(lambda: len(questions.pending()) == 2)
            assert [q.kind for q in questions.pending()] == ["clipboard", "open"]
            assert len(asked) == 1  # the open question waits: one on the screen at a time
            owner_reads_the_first.set()
            verdict = await bridge
            await until(lambda: not questions.pending())
            return asked, verdict
        finally:
            await opener.close()

    try:
        asked, verdict = asyncio.run(scenario())
    finally:
        os.close(main)
    assert verdict is Verdict.NO
    assert len(asked) == 2
    assert "the sandbox asks to read" in asked[0]
    assert "the sandbox asks to open http://localhost:8000/" in asked[1]
    assert asked[1].endswith("open it in the browser? [y/N] ")
