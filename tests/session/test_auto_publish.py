"""Auto-publish end to end: real sandboxes (both backends) whose servers come and go.

One session per backend runs :mod:`tests.apps.port_controller`, which starts and stops
servers inside when the test writes to a named pipe in the workdir. The project's
``.sandbridge/config`` publishes 8000-8999, ignores 8500, opens 8600 and keeps 8700
silent; each test uses ports of its own. Every wait is on a line the session prints or
bounded polling of what a client observes (the host port refusing connections).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from tests.conftest import (
    BACKENDS,
    PYTHON,
    REPO,
    SANDBRIDGE,
    Process,
    host_port_of,
    port_is_open,
    request,
    run_argv,
)

CONTROLLER = str(REPO / "tests" / "apps" / "port_controller.py")
CONFIG = """\
publish = 8000-8999
publish = 8500 ignore     # a database the agent starts: never on the host
publish = 8600 open
publish = 8700 silent
"""
# What the issue asks: registered, and closed, within 3 s of the change inside.
WITHIN = 3.0


@dataclass
class Session:
    """A running ``sandbridge run`` of the controller, and the pipe that drives it."""

    process: Process
    commands: IO[str]
    env: dict[str, str]
    name: str
    sentinels: Iterator[int] = field(default_factory=lambda: itertools.count(8200))
    tags: Iterator[int] = field(default_factory=itertools.count)

    def send(self, command: str) -> None:
        self.commands.write(command + "\n")
        self.commands.flush()

    def listen(self, port: int, name: str, command: str = "listen") -> None:
        self.send(f"{command} {port} {name}")
        line = self.process.wait_line(f"LISTEN {port} ")
        assert line == f"LISTEN {port} ok"

    def stop(self, port: int) -> None:
        self.send(f"stop {port}")
        self.process.wait_line(f"STOPPED {port}")

    def ask(self, text: str) -> dict[str, Any]:
        """Send ``text`` to relay.sock from inside; the host's answer."""
        tag = next(self.tags)
        self.send(f"send {tag} {text}")
        line = self.process.wait_line(f"ANSWER {tag} ")
        answer: dict[str, Any] = json.loads(line.removeprefix(f"ANSWER {tag} "))
        return answer

    def published(self, port: int, name: str, timeout: float = WITHIN) -> str:
        """The URL the host printed for ``port`` (waits at most ``timeout``)."""
        line = self.process.wait_line(
            f"sandbridge: sandbox port {port} ({name}) -> ", "stderr", timeout
        )
        return line.rsplit(" ", 1)[1]

    def settle(self) -> None:
        """Return once every port that listens now has been through a whole scan: a
        sentinel that starts listening after them is published by a later scan."""
        port = next(self.sentinels)
        self.listen(port, "sentinel")
        self.published(port, "sentinel")

    def printed(self, fragment: str) -> bool:
        return any(fragment in line for line in self.process.lines["stderr"])

    def apps(self) -> list[dict[str, Any]]:
        """This session's apps as ``sandbridge ls --json`` shows them."""
        result = subprocess.run(
            [*SANDBRIDGE, "ls", "--json"],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        records = [r for r in json.loads(result.stdout) if r["id"] == self.name]
        assert len(records) == 1, result.stdout
        apps: list[dict[str, Any]] = records[0]["apps"]
        return apps


@contextlib.contextmanager
def controlled(
    work: Path, backend: str, options: tuple[str, ...] = (), config: str | None = None
) -> Iterator[Session]:
    """``sandbridge run`` of the controller in ``work``, with a runtime base of its own
    (a short one: the sockets in it must stay within a Unix socket path's 107 bytes,
    however long pytest's names for ``work`` grow)."""
    xdg = Path(tempfile.mkdtemp(prefix="sbx-"))  # made 0700
    if config is not None:
        (work / ".sandbridge").mkdir()
        (work / ".sandbridge" / "config").write_text(config)
    fifo = work / "commands"
    os.mkfifo(fifo)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(xdg)}
    name = f"auto-{backend}"
    argv = run_argv(
        work,
        PYTHON,
        CONTROLLER,
        str(fifo),
        # --open print: what the open action does is the same with or without a desktop.
        options=("--backend", backend, "--name", name, "--open", "print", *options),
    )
    process = Process(argv, env=env)
    try:
        process.wait_line("READY", timeout=60)
        with open(fifo, "w") as commands:
            yield Session(process, commands, env, name)
    finally:
        process.stop()
        shutil.rmtree(xdg, ignore_errors=True)


@pytest.fixture(scope="module", params=BACKENDS)
def session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    backend = str(request.param)
    with controlled(tmp_path_factory.mktemp(f"auto-{backend}"), backend, config=CONFIG) as running:
        yield running


def test_a_server_started_late_is_published_within_3_s(session: Session) -> None:
    session.listen(8123, "late-server")
    url = session.published(8123, "late-server")
    status, _, body = request(host_port_of(url), path="/")
    assert (status, body) == (200, b"hello from late-server")


def test_ls_json_shows_sandbox_port_url_and_process_name(session: Session) -> None:
    session.listen(8124, "named-app")
    url = session.published(8124, "named-app")
    app = next(a for a in session.apps() if a["port"] == 8124)
    assert app["url"] == url
    assert app["host_port"] == host_port_of(url)
    assert (app["process"], app["auto"]) == ("named-app", True)


def test_ls_shows_the_process_name(session: Session) -> None:
    session.listen(8131, "listed-app")
    url = session.published(8131, "listed-app")
    result = subprocess.run(
        [*SANDBRIDGE, "ls"], env=session.env, capture_output=True, text=True, check=True
    )
    assert f"  port 8131 (listed-app) -> {url}" in result.stdout.splitlines()


def test_a_server_that_exits_is_closed_on_the_host_within_3_s(session: Session) -> None:
    session.listen(8125, "short-lived")
    host_port = host_port_of(session.published(8125, "short-lived"))
    assert port_is_open(host_port)
    session.stop(8125)
    deadline = time.monotonic() + WITHIN
    while port_is_open(host_port):
        assert time.monotonic() < deadline, f"host port {host_port} still open after {WITHIN} s"
        time.sleep(0.05)  # bounded polling of what a browser would see
    session.process.wait_line(
        f"sandbridge: sandbox port 8125 (short-lived) stopped listening; host port {host_port} "
        "closed",
        "stderr",
        timeout=WITHIN,
    )
    assert all(app["port"] != 8125 for app in session.apps())


def test_a_port_out_of_range_is_never_published(session: Session) -> None:
    session.listen(9123, "outside")
    session.settle()
    assert not session.printed("sandbox port 9123")
    assert all(app["port"] != 9123 for app in session.apps())


def test_an_ignored_port_is_never_published(session: Session) -> None:
    session.listen(8500, "database")
    session.settle()
    assert not session.printed("sandbox port 8500")
    assert all(app["port"] != 8500 for app in session.apps())


def test_open_hands_the_url_to_the_open_service(session: Session) -> None:
    """Without a desktop session the open service prints (docs/open.md)."""
    session.listen(8600, "opened")
    url = session.published(8600, "opened")
    line = session.process.wait_line("sandbridge: the sandbox opens ", "stderr", WITHIN)
    assert line == f"sandbridge: the sandbox opens {url}"


def test_silent_publishes_without_a_line(session: Session) -> None:
    session.listen(8700, "quiet")
    session.settle()
    assert not session.printed("sandbox port 8700")
    app = next(a for a in session.apps() if a["port"] == 8700)
    assert app["process"] == "quiet"
    assert request(host_port_of(app["url"]))[0] == 200


def test_a_server_on_ipv6_loopback_only_is_published_and_served(session: Session) -> None:
    """Node's ``localhost`` is ``::1`` where /etc/hosts lists it first (Debian, Ubuntu)."""
    session.listen(8130, "v6-only", command="listen6")
    url = session.published(8130, "v6-only")
    status, _, body = request(host_port_of(url))
    assert (status, body) == (200, b"hello from v6-only")


def test_the_host_refuses_an_auto_registration_its_rules_do_not_publish(
    session: Session,
) -> None:
    answer = session.ask('{"type":"register","port":9999,"auto":true,"process":"x"}')
    assert answer == {
        "ok": False,
        "error": "port 9999 is outside this session's auto-publish ports (8000-8999, 8600, 8700)",
    }
    answer = session.ask('{"type":"register","port":8500,"auto":true}')
    assert answer["error"] == "port 8500 is ignored by this session's auto-publish rules"


def test_unregister_is_refused_for_an_app_registered_without_auto(session: Session) -> None:
    registered = session.ask('{"type":"register","port":8300,"base_path":"/"}')
    assert set(registered) == {"ok", "host_port", "base_path", "url"}  # the contract's answer
    host_port = registered["host_port"]
    answer = session.ask(json.dumps({"type": "unregister", "host_port": host_port}))
    assert answer == {
        "ok": False,
        "error": f'host port {host_port} was not registered with "auto":true; only '
        "auto-published apps can be unregistered",
    }
    assert port_is_open(host_port)
    assert any(app["host_port"] == host_port for app in session.apps())


def _apps_of(session: Session, port: int) -> list[dict[str, Any]]:
    return [app for app in session.apps() if app["port"] == port]


def test_a_port_auto_published_then_registered_by_the_agent_has_one_origin(
    session: Session,
) -> None:
    session.listen(8401, "dev-server")
    url = session.published(8401, "dev-server")
    answer = session.ask('{"type":"register","port":8401,"base_path":"/"}')
    assert answer == {"ok": True, "host_port": host_port_of(url), "base_path": "/", "url": url}
    opened = session.ask('{"type":"open","url":"http://localhost:8401/a?b=1#c"}')
    assert opened["url"] == url + "a?b=1#c"
    [app] = _apps_of(session, 8401)
    assert (app["url"], app["process"], app["auto"]) == (url, "dev-server", False)
    # Registered by the agent, the app stays when the server stops (two scans later).
    session.stop(8401)
    session.settle()
    session.settle()
    assert request(host_port_of(url))[0] == 502
    assert [app["url"] for app in _apps_of(session, 8401)] == [url]
    assert not session.printed("sandbox port 8401 (dev-server) stopped listening")


def test_a_port_registered_by_the_agent_then_seen_by_auto_publish_has_one_origin(
    session: Session,
) -> None:
    answer = session.ask('{"type":"register","port":8402}')
    session.listen(8402, "late-listener")
    session.settle()  # 8402 went through a whole scan: auto-publish offered it
    assert not session.printed("sandbox port 8402 (late-listener) -> ")
    [app] = _apps_of(session, 8402)
    assert (app["host_port"], app["url"]) == (answer["host_port"], answer["url"])
    assert (app["process"], app["auto"]) == ("late-listener", False)
    status, _, body = request(host_port_of(answer["url"]), path="/")
    assert (status, body) == (200, b"hello from late-listener")
    # auto-publish lets go when the server stops; the agent's registration stays.
    session.stop(8402)
    session.settle()
    session.settle()
    assert [app["host_port"] for app in _apps_of(session, 8402)] == [answer["host_port"]]
    assert not session.printed("auto_publish.withdraw_refused port=8402")


def test_an_agent_registration_with_a_base_path_reuses_the_auto_origin_under_that_path(
    session: Session,
) -> None:
    session.listen(8403, "under-app")
    url = session.published(8403, "under-app")
    answer = session.ask('{"type":"register","port":8403,"base_path":"/app/"}')
    assert answer == {
        "ok": True,
        "host_port": host_port_of(url),
        "base_path": "/app",
        "url": url + "app",
    }
    [app] = _apps_of(session, 8403)
    assert (app["base_path"], app["url"]) == ("/", url)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"type":"unregister"}', "host_port is missing: send the integer port of the app's URL"),
        ('{"type":"unregister","host_port":"1"}', "host_port must be an integer 1..65535, got '1'"),
        ('{"type":"unregister","host_port":1}', "no app of this session has host port 1"),
        ('{"type":"register","port":8000,"process":"\\u001b[2J"}', "process must be"),
        ('{"type":"register","port":8000,"auto":"yes"}', "auto must be true or false, got 'yes'"),
        ("not json", "message is not valid JSON"),
    ],
)
def test_hostile_messages_get_a_json_refusal_and_nothing_else_is_lost(
    session: Session, text: str, error: str
) -> None:
    session.listen(port := next(session.sentinels), "survivor")
    host_port = host_port_of(session.published(port, "survivor"))
    answer = session.ask(text)
    assert answer["ok"] is False
    assert str(answer["error"]).startswith(error)
    assert request(host_port)[0] == 200


# --- the flag, and the session's app limit (one backend: the part under test is the same) --


def test_the_publish_auto_flag_publishes_without_a_config(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    with controlled(tmp_path / "work", "auto", ("--publish", "auto")) as flagged:
        flagged.listen(8123, "flag-app")
        url = flagged.published(8123, "flag-app")
        assert request(host_port_of(url))[0] == 200


def test_at_the_app_limit_new_ports_wait_and_the_sandbox_says_so(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    with controlled(tmp_path / "work", "auto", ("--publish", "auto", "--max-apps", "1")) as full:
        full.listen(8001, "first")
        full.published(8001, "first")
        full.listen(8002, "second")
        line = full.process.wait_line("auto_publish.session_full port=8002", "stderr", WITHIN)
        assert "this session already has 1 apps; the limit is 1" in line
        assert [app["port"] for app in full.apps()] == [8001]
        full.stop(8001)
        # room again: the waiting port is published by a later scan
        url = full.published(8002, "second", timeout=2 * WITHIN)
        assert request(host_port_of(url))[0] == 200


def test_past_the_rate_of_new_apps_ports_wait_and_the_sandbox_says_so_once(
    tmp_path: Path,
) -> None:
    """A window of an hour: the rate is passed however slowly the machine registers."""
    (tmp_path / "work").mkdir()
    rate = ("--auto-publish-apps", "2", "--auto-publish-window", "3600")
    with controlled(tmp_path / "work", "auto", ("--publish", "auto", *rate)) as churning:
        for port in (8001, 8002, 8003):
            churning.send(f"listen {port} burst")
        for port in (8001, 8002, 8003):
            assert churning.process.wait_line(f"LISTEN {port} ") == f"LISTEN {port} ok"
        line = churning.process.wait_line("auto_publish.throttled port=", "stderr", WITHIN)
        assert "too many new ports to publish at once: 2 new apps in 3600 s" in line
        published = {port for port in (8001, 8002, 8003) if f"port={port}" not in line}
        for port in published:
            churning.published(port, "burst")
        # An app the agent registers itself is not held back.
        answer = churning.ask('{"type":"register","port":9100,"base_path":"/"}')
        assert answer["ok"] is True, answer
        assert {app["port"] for app in churning.apps()} == {*published, 9100}
        # The sandbox said it once for the burst, not once per port or per scan.
        assert (
            sum("auto_publish.throttled" in seen for seen in churning.process.lines["stderr"]) == 1
        )


def test_ports_held_back_by_the_rate_are_published_once_the_window_has_room(
    tmp_path: Path,
) -> None:
    (tmp_path / "work").mkdir()
    rate = ("--auto-publish-apps", "2", "--auto-publish-window", "2")
    with controlled(tmp_path / "work", "auto", ("--publish", "auto", *rate)) as churning:
        for port in (8001, 8002, 8003):
            churning.send(f"listen {port} burst")
        urls = [
            churning.published(port, "burst", timeout=2 + 2 * WITHIN) for port in (8001, 8002, 8003)
        ]
        assert request(host_port_of(urls[-1]))[0] == 200
