"""``sandbridge ui --print-url`` as a real process, reached with real HTTP clients:
who gets in, what every answer carries, and the event stream."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import socket
import subprocess
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbridge.places.registry import AppRecord, SessionEntry
from sandbridge.ui.server import MAX_CONNECTIONS
from sandbridge.ui.server import Dashboard as ServedDashboard
from tests.conftest import SANDBRIDGE, Process
from tests.relay.host.test_local_peer import AS_NOBODY


@dataclass
class Dashboard:
    process: Process
    url: str

    @property
    def port(self) -> int:
        port = urllib.parse.urlsplit(self.url).port
        assert port is not None
        return port

    @property
    def host(self) -> str:
        """Its own ``<label>.localhost:PORT``, as the URL names it."""
        return urllib.parse.urlsplit(self.url).netloc

    def request(
        self, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(
                method, path, body=body or None, headers={"Host": self.host, **(headers or {})}
            )
            answer = conn.getresponse()
            return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
        finally:
            conn.close()

    def login(self) -> str:
        """Spend the token; return the cookie header value."""
        status, headers, _ = self.request("GET", self.url.split(self.host, 1)[1])
        assert status == 303 and headers["location"] == "/"
        return headers["set-cookie"].split(";", 1)[0]


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[Dashboard]:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    env = {"PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": str(xdg), "HOME": str(tmp_path)}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    process = Process([*SANDBRIDGE, "ui", "--print-url"], env=env)
    url = process.wait_line("http://")
    yield Dashboard(process, url)
    assert process.stop() == 0


def _csrf(page: bytes) -> str:
    match = re.search(rb'name="sandbridge-csrf" content="([^"]+)"', page)
    assert match is not None
    return match.group(1).decode()


def test_the_token_works_once(dashboard: Dashboard) -> None:
    cookie = dashboard.login()
    assert cookie.startswith("sandbridge_ui=")
    status, _, body = dashboard.request("GET", dashboard.url.split(dashboard.host, 1)[1])
    assert status == 403 and b"already used" in body


def test_the_cookie_is_httponly_and_strict(dashboard: Dashboard) -> None:
    _, headers, _ = dashboard.request("GET", dashboard.url.split(dashboard.host, 1)[1])
    assert "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]


def test_a_request_without_the_cookie_is_refused(dashboard: Dashboard) -> None:
    dashboard.login()
    for path in ("/", "/api/state", "/events", "/app.js"):
        status, _, body = dashboard.request("GET", path)
        assert status == 401, path
        assert b"sandbridge ui" in body


def test_a_wrong_host_is_refused_even_with_the_cookie(dashboard: Dashboard) -> None:
    cookie = dashboard.login()
    port = dashboard.port
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1", f"127.0.0.1:{port}"):
        status, _, _ = dashboard.request("GET", "/", {"Host": host, "Cookie": cookie})
        assert status == 421, host


def test_the_page_is_served_with_a_strict_policy(dashboard: Dashboard) -> None:
    cookie = dashboard.login()
    status, headers, page = dashboard.request("GET", "/", {"Cookie": cookie})
    assert status == 200
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert "default-src 'none'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"
    assert headers["x-content-type-options"] == "nosniff"
    assert re.findall(rb"<script[^>]*>", page) == [b'<script src="/app.js" defer>']
    status, headers, script = dashboard.request("GET", "/app.js", {"Cookie": cookie})
    assert status == 200 and headers["content-type"].startswith("text/javascript")
    assert b"innerHTML" not in script


def test_a_cross_origin_post_is_refused(dashboard: Dashboard) -> None:
    cookie = dashboard.login()
    csrf = _csrf(dashboard.request("GET", "/", {"Cookie": cookie})[2])
    body = json.dumps({"action": "stop", "session": "web"}).encode()
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {},
        {"Origin": f"http://{dashboard.host}", "Sec-Fetch-Site": "cross-site"},
    ):
        sent = {"Cookie": cookie, "X-Sandbridge-CSRF": csrf, **headers}
        status, _, answer = dashboard.request("POST", "/api/action", sent, body)
        assert status == 403, (headers, answer)


def test_a_post_without_the_csrf_token_is_refused(dashboard: Dashboard) -> None:
    cookie = dashboard.login()
    headers = {"Cookie": cookie, "Origin": f"http://{dashboard.host}"}
    status, _, answer = dashboard.request("POST", "/api/action", headers, b"{}")
    assert status == 403 and b"CSRF" in answer


def test_the_pages_own_post_reaches_the_action_and_a_bad_one_is_named(
    dashboard: Dashboard,
) -> None:
    cookie = dashboard.login()
    csrf = _csrf(dashboard.request("GET", "/", {"Cookie": cookie})[2])
    headers = {"Cookie": cookie, "Origin": f"http://{dashboard.host}", "X-Sandbridge-CSRF": csrf}
    body = json.dumps({"action": "stop", "session": "no-such"}).encode()
    status, _, answer = dashboard.request("POST", "/api/action", headers, body)
    assert status == 400
    assert json.loads(answer) == {
        "ok": False,
        "error": "no running session 'no-such'; see sandbridge ls",
    }
    status, _, answer = dashboard.request("POST", "/api/action", headers, b"[1]")
    assert status == 400 and b"not a JSON object" in answer
    status, _, answer = dashboard.request("POST", "/api/action", headers, b"x" * 20000)
    assert status == 413
    # Python's parser recursed through 16 KiB of brackets (a RecursionError ended the
    # connection with no answer) and took NaN: the one loader refuses both, naming why.
    nested = b"[" * 8000 + b"]" * 8000
    refusals = ((nested, b"nested deeper than 32 levels"), (b'{"ttl": NaN}', b"not valid JSON"))
    for bad, says in refusals:
        status, _, answer = dashboard.request("POST", "/api/action", headers, bad)
        assert status == 400 and says in answer, answer


def test_the_event_stream_proves_its_dashboard_then_sends_the_tables(dashboard: Dashboard) -> None:
    cookie = dashboard.login()
    csrf = _csrf(dashboard.request("GET", "/", {"Cookie": cookie})[2])
    with socket.create_connection(("127.0.0.1", dashboard.port), timeout=10) as sock:
        sock.sendall(
            f"GET /events HTTP/1.1\r\nHost: {dashboard.host}\r\nCookie: {cookie}\r\n\r\n".encode()
        )
        received = b""
        while received.partition(b"\r\n\r\n")[2].count(b"\n\n") < 2:  # proof, tables
            chunk = sock.recv(65536)
            assert chunk, received
            received += chunk
    head, _, stream = received.partition(b"\r\n\r\n")
    hello, first = stream.split(b"\n\n")[:2]
    assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head
    # The page shows nothing before its own dashboard's token (a listener that took a
    # dashboard's port after it ended does not know it).
    assert hello == f"event: hello\ndata: {csrf}".encode()
    tables = json.loads(first.removeprefix(b"data: "))
    assert set(tables) == {
        "sessions",
        "apps",
        "terminals",
        "egress",
        "egress_pending",
        "logins",
        "questions",
    }


def test_another_users_connection_gets_no_answer(dashboard: Dashboard) -> None:
    token_path = dashboard.url.split(dashboard.host, 1)[1]
    code = (
        "import socket;"
        f"s=socket.create_connection(('127.0.0.1',{dashboard.port}));"
        f"s.sendall(b'GET {token_path} HTTP/1.1\\r\\nHost: {dashboard.host}\\r\\n\\r\\n');"
        "print(repr(s.recv(100)))"
    )
    seen = subprocess.run(
        [*AS_NOBODY, "/usr/bin/python3", "-c", code], capture_output=True, text=True, timeout=30
    )
    assert seen.stdout.strip() == "b''" or "ConnectionResetError" in seen.stderr, seen
    dashboard.login()  # the token was not spent by the refused connection


def test_connections_that_send_nothing_cannot_keep_the_owner_out(dashboard: Dashboard) -> None:
    # A `--network full` sandbox runs as the owner, so its connections pass the peer
    # check: holding every place (a connection per place, nothing sent, again each time
    # the head timeout closes one) kept the owner's page from loading or acting.
    silent = [
        socket.create_connection(("127.0.0.1", dashboard.port), timeout=10)
        for _ in range(MAX_CONNECTIONS + 8)
    ]
    try:
        cookie = dashboard.login()
        status, _, tables = dashboard.request("GET", "/api/state", {"Cookie": cookie})
        assert status == 200 and "sessions" in json.loads(tables)
        # The oldest of those still sending their request made room, closed unanswered.
        assert silent[0].recv(100) == b""
    finally:
        for sock in silent:
            sock.close()


async def _stream(host: str, cookie: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", int(host.rsplit(":", 1)[1]))
    writer.write(f"GET /events HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n\r\n".encode())
    assert (await reader.readline()).startswith(b"HTTP/1.1 200")
    return reader, writer  # the writer kept: dropped, it would close the connection


async def _logged_in(dashboard: ServedDashboard) -> str:
    """Spend ``dashboard``'s login URL; return its cookie."""
    reader, writer = await asyncio.open_connection("127.0.0.1", dashboard.port)
    query = urllib.parse.urlsplit(dashboard.login_url()).query
    writer.write(f"GET /?{query} HTTP/1.1\r\nHost: {dashboard.access.host}\r\n\r\n".encode())
    head = (await reader.read()).decode()
    writer.close()
    cookie = re.search(r"Set-Cookie: ([^;]+);", head)
    assert cookie is not None, head
    return cookie.group(1)


async def _next_tables(reader: asyncio.StreamReader) -> object:
    named = False  # a data line of a named event (the proof), not of the tables
    while line := await reader.readline():
        if line.startswith(b"event: "):
            named = True
        elif line.startswith(b"data: ") and not named:
            return json.loads(line.removeprefix(b"data: "))
        elif line == b"\n":
            named = False
    raise AssertionError("the event stream ended")


def test_one_feed_reads_the_tables_for_every_tab_and_a_burst_of_changes_once(xdg: Path) -> None:
    reads: list[int] = []

    async def snapshot() -> dict[str, object]:
        reads.append(len(reads) + 1)
        return {"read": len(reads)}

    async def scenario() -> None:
        # No timed re-read: only what it is told of.
        dashboard = ServedDashboard(snapshot, refresh=3600.0)
        await dashboard.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", dashboard.port)
            query = urllib.parse.urlsplit(dashboard.login_url()).query
            writer.write(
                f"GET /?{query} HTTP/1.1\r\nHost: {dashboard.access.host}\r\n\r\n".encode()
            )
            head = (await reader.read()).decode()
            cookie = re.search(r"Set-Cookie: ([^;]+);", head)
            assert cookie is not None, head
            tabs = [await _stream(dashboard.access.host, cookie.group(1)) for _ in range(3)]
            assert [await _next_tables(tab) for tab, _ in tabs] == [{"read": 1}] * 3
            for _ in range(100):
                dashboard.notify()
            assert [await _next_tables(tab) for tab, _ in tabs] == [{"read": 2}] * 3
            assert reads == [1, 2], "three tabs, a hundred changes told: two reads"
            for _, tab_writer in tabs:
                tab_writer.close()
        finally:
            await dashboard.close()

    asyncio.run(scenario())


def test_a_session_starting_and_ending_shows_at_once_without_a_timed_reread(xdg: Path) -> None:
    """The feed watches the registry (places/registry_watch.py): a standalone session
    that starts, changes its apps and ends shows on the open tab though the feed never
    re-reads on its own (``refresh`` an hour) and nobody calls ``notify``."""

    async def scenario() -> None:
        dashboard = ServedDashboard(refresh=3600.0)
        await dashboard.start()
        entry: SessionEntry | None = None
        try:
            tab, tab_writer = await _stream(dashboard.access.host, await _logged_in(dashboard))
            assert await _next_tables(tab) == {
                "sessions": [], "apps": [], "terminals": [], "egress": [], "egress_pending": [],
                "logins": [], "questions": [],
            }  # fmt: skip
            entry = SessionEntry.create("web", xdg)
            tables = await _next_tables(tab)
            assert isinstance(tables, dict) and [s["id"] for s in tables["sessions"]] == ["web"]
            entry.set_apps([AppRecord(8000, 43125, "/", "http://127.0.0.1:43125/", False)])
            tables = await _next_tables(tab)
            assert isinstance(tables, dict) and [a["port"] for a in tables["apps"]] == [8000]
            entry.remove()
            entry = None
            tables = await _next_tables(tab)
            assert isinstance(tables, dict) and tables["sessions"] == []
            tab_writer.close()
        finally:
            if entry is not None:
                entry.remove()
            await dashboard.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))
