"""The dashboard the daemon serves: its URLs, who may ask for one, who may use it, and
that it shows the daemon's sessions from the daemon's own state."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbridge.daemon.dashboard import ask_url
from sandbridge.exceptions import DaemonError
from sandbridge.protocol import daemon_wire
from sandbridge.protocol.contract import CONTROL_SOCKET
from tests.conftest import ECHO_APP, PYTHON, SANDBRIDGE, Process, run_argv, start_daemon
from tests.daemon.test_server import AS_NOBODY, ask, socket_path

# Asks the daemon for a dashboard URL and prints its one answer (run as another user, or
# inside a sandbox).
ASK_URL = """
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
sock.connect(sys.argv[1])
try:
    sock.send(b'{"version":1,"dashboard":"url"}')
except OSError:
    pass  # refused at once, before the request: the answer is waiting all the same
print(sock.recv(65536).decode(), flush=True)
"""


def ui_url(env: dict[str, str] | None = None) -> str:
    """``sandbridge ui --print-url``: with a daemon it prints the URL and returns."""
    result = subprocess.run(
        [*SANDBRIDGE, "ui", "--print-url"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "the daemon serves it" in result.stderr
    return result.stdout.strip()


def get(
    url: str, path: str | None = None, headers: dict[str, str] | None = None
) -> http.client.HTTPResponse:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=10)
    target = path if path is not None else f"{parts.path}?{parts.query}"
    conn.request("GET", target, headers={"Host": parts.netloc, **(headers or {})})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


def log_in(url: str) -> str:
    """The dashboard cookie the one-time URL gives (``name=value``)."""
    response = get(url)
    assert response.status == 303, response.status
    return response.getheader("Set-Cookie", "").partition(";")[0]


class EventStream:
    """The dashboard's ``/events``, read one table update at a time."""

    def __init__(self, url: str, cookie: str) -> None:
        parts = urllib.parse.urlsplit(url)
        assert parts.port is not None
        self.sock = socket.create_connection(("127.0.0.1", parts.port), timeout=30)
        self.sock.sendall(
            f"GET /events HTTP/1.1\r\nHost: {parts.netloc}\r\nCookie: {cookie}\r\n\r\n".encode()
        )
        self.file = self.sock.makefile("rb")
        assert self.file.readline().startswith(b"HTTP/1.1 200")

    def next(self) -> dict[str, Any]:
        named = False  # a data line of a named event (the proof), not of the tables
        while line := self.file.readline():
            if line.startswith(b"event: "):
                named = True
            elif line.startswith(b"data: ") and not named:
                tables: dict[str, Any] = json.loads(line.removeprefix(b"data: "))
                return tables
            elif line == b"\n":
                named = False
        raise AssertionError("the event stream ended")

    def until(self, condition: Any) -> dict[str, Any]:
        while not condition(tables := self.next()):
            pass
        return tables

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def test_each_sandbridge_ui_gets_a_new_url_of_the_daemons_dashboard_good_once(
    daemon: Process, xdg: Path
) -> None:
    first, second = ui_url(), ui_url()
    assert first != second
    assert urllib.parse.urlsplit(first).port == urllib.parse.urlsplit(second).port
    daemon.wait_line("sandbridge: ui.listening ", "stderr")
    for url in (second, first):
        assert get(url).status == 303
        assert get(url).status == 403, "a used token is refused"


def test_a_url_without_a_token_or_with_a_wrong_one_is_refused(daemon: Process, xdg: Path) -> None:
    url = ui_url()
    assert get(url, "/").status == 401
    assert get(url, "/?token=guess").status == 403
    assert get(url, "/api/state").status == 401
    assert get(url).status == 303, "the right token still works once"


def test_a_cross_site_post_is_refused(daemon: Process, xdg: Path) -> None:
    url = ui_url()
    cookie = log_in(url)
    port, host = urllib.parse.urlsplit(url).port, urllib.parse.urlsplit(url).netloc
    page = get(url, "/", {"Cookie": cookie})
    assert page.status == 200
    body = json.dumps({"action": "stop", "session": "web"})
    for headers, said in (
        # another site, even with the cookie
        ({"Origin": "http://evil.example"}, b"cross-site request refused"),
        # its own origin, without the CSRF token
        ({"Origin": f"http://{host}"}, b"missing or wrong CSRF token"),
    ):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/api/action", body, {"Host": host, "Cookie": cookie, **headers})
        response = conn.getresponse()
        assert response.status == 403, headers
        assert response.read().startswith(said)
        conn.close()


def test_a_dashboard_request_with_descriptors_is_refused(daemon: Process, xdg: Path) -> None:
    message = daemon_wire.encode(daemon_wire.dashboard_message())
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    try:
        answer = ask(xdg, message, [fd])
    finally:
        os.close(fd)
    assert answer == {"error": "a dashboard request carries no descriptors, not 1"}


def test_a_peer_of_another_uid_is_refused_a_url(monkeypatch: pytest.MonkeyPatch) -> None:
    # Even with the state root opened up by mistake, the peer's uid is checked.
    xdg = Path(tempfile.mkdtemp(prefix="sandbridge-ui-peer-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    daemon = start_daemon()
    try:
        os.chmod(xdg, 0o711)
        os.chmod(socket_path(xdg).parent, 0o711)
        os.chmod(socket_path(xdg), 0o666)
        client = Process([*AS_NOBODY, "/usr/bin/python3", "-c", ASK_URL, str(socket_path(xdg))])
        answer = json.loads(client.wait_line("{"))
        assert answer == {"error": "uid 65534 is not the daemon's user; use your own daemon"}
        assert "ui.listening" not in daemon.drain(), "no dashboard was started for it"
    finally:
        daemon.stop()
        shutil.rmtree(xdg, ignore_errors=True)


def test_a_sandbox_that_reaches_the_daemon_socket_is_refused_a_url(
    daemon: Process, xdg: Path, tmp_path: Path
) -> None:
    # Same uid, another mount namespace: a sandbox (or a container) never gets a URL.
    work = tmp_path / "work"
    work.mkdir()
    os.link(socket_path(xdg), work / "daemon.sock")
    probe = ["/usr/bin/python3", "-c", ASK_URL, str(work / "daemon.sock")]
    result = subprocess.run(
        run_argv(work, *probe, options=("--no-daemon",)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    answer = json.loads(result.stdout)
    assert "is not in the daemon's mount namespace (a sandbox or a container)" in str(
        answer["error"]
    ), result.stderr
    assert "dashboard" not in str(answer)


@pytest.fixture
def stream(daemon: Process, xdg: Path) -> Iterator[EventStream]:
    url = ui_url()
    events = EventStream(url, log_in(url))
    yield events
    events.close()


def test_the_daemons_sessions_are_shown_from_its_state_not_their_control_sockets(
    stream: EventStream, xdg: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    command = f"while [ ! -e go ]; do sleep 0.05; done; exec {PYTHON} {ECHO_APP} --register 4173"
    run = Process(run_argv(work, "sh", "-c", command, options=("--name", "web")))
    try:
        stream.until(
            lambda t: [(s["id"], bool(s["command"])) for s in t["sessions"]] == [("web", True)]
        )
        run.wait_line("sandbridge: session web", "stderr")
        # Nobody can reach the session's control socket by its path any more: the
        # dashboard must learn of the app, and the session's command, from the daemon.
        session_dir = xdg / f"sandbridge-{os.getuid()}" / "sessions" / "web"
        (session_dir / CONTROL_SOCKET).unlink()
        (work / "go").touch()
        tables = stream.until(lambda t: [a["port"] for a in t["apps"]] == [4173])
        (session,) = tables["sessions"]
        assert session["command"].endswith("--register 4173") and session["controllable"]
    finally:
        run.stop()
    stream.until(lambda t: t["sessions"] == [])


def test_a_standalone_session_beside_the_daemon_is_shown_with_its_details(
    stream: EventStream, tmp_path: Path
) -> None:
    """Not the daemon's: seen in the registry (watched, places/registry_watch.py) and
    asked over its control socket. Its dir is in the registry before its control socket
    answers (the first read may list it without details): the socket appearing in its
    dir is a change too, read again."""
    work = tmp_path / "work"
    work.mkdir()
    run = Process(run_argv(work, "sleep", "600", options=("--name", "alone", "--no-daemon")))
    try:
        tables = stream.until(
            lambda t: (
                [s["id"] for s in t["sessions"]] == ["alone"]
                and t["sessions"][0]["command"] is not None
            )
        )
        assert tables["sessions"][0]["command"] == "sleep 600"
    finally:
        run.stop()
    stream.until(lambda t: t["sessions"] == [])


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (
            b'{"error": "a daemon request needs its session\'s options under \'serve\'"}',
            "the daemon refused the dashboard request: a daemon request needs its session's "
            "options under 'serve' (`sandbridge ui --no-daemon` serves the page without it)",
        ),
        (b'{"ready": "web"}', "the daemon answered 'ready', not a dashboard URL"),
        (b"", "the daemon closed the connection without a dashboard URL"),
        (b"[]", "a daemon message must be a JSON object"),
    ],
    ids=["older-daemon", "other-event", "closed", "garbage"],
)
def test_sandbridge_ui_says_why_the_daemon_gave_no_url(answer: bytes, said: str) -> None:
    ours, daemons = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, daemons:
        if answer:
            daemons.send(answer)
        else:
            daemons.shutdown(socket.SHUT_WR)
        with pytest.raises(DaemonError) as refused:
            ask_url(ours)
        assert str(refused.value) == said
        assert daemons.recv(100) == b'{"version":1,"dashboard":"url"}'
