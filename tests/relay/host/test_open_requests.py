"""Open requests on a real ``relay.sock``, served by ``sandbridge host``."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import signal
import socket
import subprocess
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.protocol.limits import MAX_OPENS_PER_WINDOW
from tests.conftest import (
    PYTHON,
    REPO,
    SANDBRIDGE,
    Relay,
    echo,
    free_port,
    host_port_of,
    module_relay,
    request,
)


@pytest.fixture(scope="module")
def app_port(shared_app_port: int) -> int:
    return shared_app_port


RECORDER = str(REPO / "tests" / "apps" / "record_browser.py")
# A refusal names the bad value, cut short: never an echo of a whole hostile message.
MAX_ERROR_LENGTH = 300


def _ask(path: Path, data: bytes) -> dict[str, object]:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(15)
        sock.connect(str(path))
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    value: dict[str, object] = json.loads(answer)
    return value


def _open(relay: Relay, url: object) -> dict[str, object]:
    line = json.dumps({"type": "open", "url": url}).encode() + b"\n"
    return _ask(relay.runtime_dir / "relay.sock", line)


def _recorded(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def printing(runtime_dir: Path) -> Relay:
    return Relay(runtime_dir, host_args=("--open", "print"))


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relay]:
    """One relay that prints opens, for the tests of single refusals: a refused open is
    no open, and the bad snapshots that get as far as counting stay under
    MAX_OPENS_PER_WINDOW."""
    with module_relay(tmp_path_factory, host_args=("--open", "print")) as relay:
        yield relay


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (b'{"type":"open"}\n', "url is missing"),
        (b'{"type":"open","url":5}\n', "url must be a string, got 5"),
        (b'{"type":"open","url":["http://localhost/"]}\n', "url must be a string, got ['http"),
        (b'{"type":"open","url":"http://localhost:80/\\u001b[2J"}\n', "printable ASCII"),
        (b'{"type":"open","url":"javascript:alert(1)"}\n', "'javascript:alert(1)'"),
        (b'{"type":"open","url":"file:///etc/passwd"}\n', "'file:///etc/passwd'"),
        (b'{"type":"open","url":"https://localhost:8443/"}\n', "TLS"),
        (b'{"type":"open","url":"http://localhost:99999/"}\n', "not 1..65535"),
        (b'{"type":"opan","url":"http://localhost/"}\n', "got 'opan'"),
        (
            b'{"type":"' + b"o" * 3000 + b'"}\n',
            "type must be 'register', 'open' or 'unregister', got 'ooo",
        ),
        (b'{"type":"open","url":"' + b"h" * 5000 + b'"}\n', "message longer than 4096 bytes"),
        (b"[" * 100 + b"]" * 100 + b"\n", "nested deeper than 32 levels"),
        (b"not json\n", "message is not valid JSON"),
    ],
)
def test_hostile_open_message_is_refused_naming_the_value(
    refusing: Relay, message: bytes, error: str
) -> None:
    answer = _ask(refusing.runtime_dir / "relay.sock", message)
    assert answer["ok"] is False
    assert error in str(answer["error"])
    assert len(str(answer["error"])) <= MAX_ERROR_LENGTH
    assert set(answer) == {"ok", "error"}


def test_refused_open_messages_cost_no_registration_and_no_open(
    printing: Relay, app_port: int
) -> None:
    try:
        for url in (5, "file:///x", "https://localhost:1/", "http://localhost:0/"):
            assert _open(printing, url)["ok"] is False
        # The whole budget is still there, and nothing was registered or printed.
        answers = [_open(printing, f"https://example.com/{n}") for n in range(MAX_OPENS_PER_WINDOW)]
        assert all(answer["ok"] is True for answer in answers)
    finally:
        printing.stop()
    stderr = printing.host.lines["stderr"] + printing.host.drain("stderr").splitlines()
    assert not [line for line in stderr if "sandbox port" in line]
    # Only the debug log of refusals (the relay runs with -v) names them; nothing is
    # said to the owner as an open.
    named = [line for line in stderr if "file:///x" in line or "localhost:0" in line]
    assert len(named) == 2
    assert all(line.startswith("sandbridge: registration.refused answer=") for line in named)


def test_flood_of_open_requests_is_rate_limited_and_said_once(printing: Relay) -> None:
    try:
        answers = [_open(printing, f"https://example.com/{n}") for n in range(30)]
        printing.host.wait_line("sandbridge: the sandbox floods open requests", "stderr")
    finally:
        printing.stop()
    refused = [answer for answer in answers if answer["ok"] is False]
    assert len(refused) == 30 - MAX_OPENS_PER_WINDOW
    assert answers[:MAX_OPENS_PER_WINDOW] == [
        {"ok": True, "url": f"https://example.com/{n}", "action": "print"}
        for n in range(MAX_OPENS_PER_WINDOW)
    ]
    assert all("too many open requests" in str(answer["error"]) for answer in refused)
    stderr = printing.host.lines["stderr"] + printing.host.drain("stderr").splitlines()
    assert len([line for line in stderr if "floods open requests" in line]) == 1
    assert len([line for line in stderr if "external URL" in line]) == MAX_OPENS_PER_WINDOW


def test_local_url_resolves_to_one_registration_and_keeps_path_query_and_fragment(
    printing: Relay, app_port: int
) -> None:
    try:
        first = _open(printing, f"http://localhost:{app_port}/a/b?x=1#f")
        again = _open(printing, f"http://127.0.0.1:{app_port}/c?y=2")
        registered = printing.register(app_port)
        assert first["ok"] is True and again["ok"] is True
        first_url, again_url = str(first["url"]), str(again["url"])
        origin = first_url.removesuffix("/a/b?x=1#f")
        assert again_url == origin + "/c?y=2"
        # The contract's register is as it was: a new host origin every time.
        assert not registered.startswith(origin)
        assert echo(host_port_of(first_url), "/a/b?x=1")["path"] == "/a/b?x=1"
        printing.host.wait_line(f"sandbridge: the sandbox opens {first_url}", "stderr")
    finally:
        printing.stop()


def test_external_url_is_printed_not_run_by_default(runtime_dir: Path, app_port: int) -> None:
    out = runtime_dir.parent / "browser.jsonl"
    relay = Relay(
        runtime_dir, host_args=("--open", "browser", "--browser", f"{PYTHON} {RECORDER} {out}")
    )
    try:
        external = _open(relay, "https://example.com/login?code=1")
        local = _open(relay, f"http://localhost:{app_port}/x?y=1#z")
        relay.host.wait_line("sandbridge: WARNING: the sandbox asks to open an external", "stderr")
    finally:
        relay.stop()  # the session waits for browser commands still starting
    assert external == {"ok": True, "url": "https://example.com/login?code=1", "action": "print"}
    assert local["action"] == "browser"
    assert _recorded(out) == [[str(local["url"])]]
    assert str(local["url"]).endswith(f".localhost:{host_port_of(str(local['url']))}/x?y=1#z")


def test_external_url_runs_the_browser_when_allowed(runtime_dir: Path) -> None:
    out = runtime_dir.parent / "browser.jsonl"
    relay = Relay(
        runtime_dir,
        host_args=(
            "--open",
            "browser",
            "--browser",
            f"{PYTHON} {RECORDER} {out}",
            "--open-external",
            "allow",
        ),
    )
    try:
        answer = _open(relay, "https://example.com/login?code=1#top")
    finally:
        relay.stop()
    url = "https://example.com/login?code=1#top"
    assert answer == {"ok": True, "url": url, "action": "browser"}
    assert _recorded(out) == [["https://example.com/login?code=1#top"]]


def test_allowed_external_url_in_print_mode_is_printed_without_the_warning(
    runtime_dir: Path,
) -> None:
    relay = Relay(runtime_dir, host_args=("--open", "print", "--open-external", "allow"))
    try:
        answer = _open(relay, "https://example.com/a")
        line = relay.host.wait_line("sandbridge: the sandbox opens", "stderr")
    finally:
        relay.stop()
    assert answer == {"ok": True, "url": "https://example.com/a", "action": "print"}
    assert line == "sandbridge: the sandbox opens https://example.com/a"
    stderr = relay.host.lines["stderr"] + relay.host.drain("stderr").splitlines()
    assert not [text for text in stderr if "WARNING" in text]


def test_html_snapshot_is_served_on_its_own_origin(printing: Relay) -> None:
    page = b"<!doctype html><title>snap</title><p>hello \xe2\x9c\x93</p>"
    try:
        answer = _ask(
            printing.runtime_dir / "relay.sock",
            json.dumps({"type": "open", "html_bytes": len(page)}).encode() + b"\n" + page,
        )
        again = _ask(
            printing.runtime_dir / "relay.sock",
            json.dumps({"type": "open", "html_bytes": len(page)}).encode() + b"\n" + page,
        )
        assert answer["ok"] is True and answer["action"] == "print"
        url = str(answer["url"])
        assert url.endswith(".localhost:" + str(host_port_of(url)) + "/")
        assert host_port_of(str(again["url"])) != host_port_of(url)
        status, headers, body = request(host_port_of(url), path="/any?x=1")
        assert (status, body) == (200, page)
        assert headers["Content-Type"] == "text/html; charset=utf-8"
        assert headers["Content-Security-Policy"] == "sandbox allow-scripts"
        wrong_host = request(host_port_of(url), headers={"Host": f"127.0.0.1:{host_port_of(url)}"})
        assert wrong_host[0] == 421
        assert request(host_port_of(url), method="POST", body=b"x")[0] == 405
    finally:
        printing.stop()


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b'{"type":"open","html_bytes":2097153}\n', "the HTML is 2097153 bytes; the snapshot"),
        (b'{"type":"open","html_bytes":-1}\n', "html_bytes must be a byte count, got -1"),
        (b'{"type":"open","html_bytes":"9"}\n', "html_bytes must be a byte count, got '9'"),
        (b'{"type":"open","html_bytes":3,"url":"http://a/"}\n', "not both"),
        (b'{"type":"open","html_bytes":10}\nshort', "closed after 5 of the 10 bytes"),
        (b'{"type":"open","html_bytes":2}\ntoo long', "more than the 2 bytes of HTML"),
    ],
)
def test_bad_html_snapshot_is_refused(refusing: Relay, data: bytes, error: str) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(15)
        sock.connect(str(refusing.runtime_dir / "relay.sock"))
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        answer = json.loads(sock.makefile("rb").read())
    assert answer["ok"] is False
    assert error in answer["error"]


def test_private_app_url_carries_its_token_until_it_is_used(
    runtime_dir: Path, app_port: int
) -> None:
    relay = Relay(runtime_dir, host_args=("--open", "print", "--private"))
    try:
        first = str(_open(relay, f"http://localhost:{app_port}/a?x=1#f")["url"])
        origin, _, rest = first.partition("/a?")
        assert rest.startswith("x=1&sandbridge_token=") and rest.endswith("#f")
        status, headers, _ = request(host_port_of(first), path="/a?" + rest.partition("#")[0])
        assert (status, headers["Location"]) == (303, "/a?x=1")
        # The owner's browser now holds the cookie: the next URL needs no token.
        assert _open(relay, f"http://localhost:{app_port}/b")["url"] == origin + "/b"
    finally:
        relay.stop()


class OnTerminal:
    """``sandbridge host`` with a pseudo-terminal as its controlling terminal and stdin."""

    def __init__(self, runtime_dir: Path, *args: str) -> None:
        self.master, slave = pty.openpty()
        self.popen = subprocess.Popen(
            [*SANDBRIDGE, "host", "--runtime-dir", str(runtime_dir), *args],
            stdin=slave,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(slave)
        self.shown = b""
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            if line.startswith(b"sandbridge: serving registrations"):
                break

    def wait_for(self, text: bytes, timeout: float = 30.0) -> None:
        """Read the terminal until ``text`` appears on it."""
        while text not in self.shown:
            ready, _, _ = select.select([self.master], [], [], timeout)
            assert ready, f"{text!r} not on the terminal; it shows {self.shown!r}"
            self.shown += os.read(self.master, 4096)

    def wait_line(self, prefix: str) -> str:
        """The next line on stderr starting with ``prefix`` (reads until it comes)."""
        assert self.popen.stderr is not None
        for raw in self.popen.stderr:
            line = raw.decode().rstrip("\n")
            if line.startswith(prefix):
                return line
        raise AssertionError(f"stderr ended before a line starting {prefix!r}")

    def stop(self) -> str:
        self.popen.send_signal(signal.SIGTERM)
        _, stderr = self.popen.communicate(timeout=30)
        os.close(self.master)
        return stderr.decode()


def _asking(runtime_dir: Path, out: Path) -> OnTerminal:
    """A host at a terminal that asks before it opens (external URLs too), its browser
    command recording to ``out``."""
    return OnTerminal(
        runtime_dir,
        "--open",
        "ask",
        "--open-external",
        "allow",
        "--browser",
        f"{PYTHON} {RECORDER} {out}",
    )


@pytest.mark.parametrize(("reply", "opened"), [(b"y\r", True), (b"\r", False)])
def test_ask_asks_on_the_terminal_and_opens_only_on_yes(
    runtime_dir: Path, reply: bytes, opened: bool
) -> None:
    out = runtime_dir.parent / "browser.jsonl"
    url = "https://example.com/device?code=1"
    host = _asking(runtime_dir, out)
    try:
        answer = _ask(
            runtime_dir / "relay.sock", json.dumps({"type": "open", "url": url}).encode() + b"\n"
        )
        assert answer == {"ok": True, "url": url, "action": "ask"}
        host.wait_for(f"the sandbox asks to open {url}".encode())
        host.wait_for(b"open it in the browser? [y/N] ")
        os.write(host.master, reply)
        # The answer is read before the stop (a question still open when the session ends
        # is withdrawn): the host says what it did with it.
        if opened:
            assert host.wait_line("sandbridge: the sandbox opens") == (
                f"sandbridge: the sandbox opens {url} (with {PYTHON}: your yes)"
            )
        else:
            assert host.wait_line("sandbridge: not opened") == f"sandbridge: not opened: {url}"
    finally:
        stderr = host.stop()  # waits for the browser command the answer started
    assert _recorded(out) == ([[url]] if opened else [])
    assert "not opened" not in stderr


def test_a_second_question_is_refused_while_the_first_is_open(runtime_dir: Path) -> None:
    # Before, both questions read the one terminal: the owner's "y" to the first went to
    # whichever read first, and could open the second URL, never agreed to.
    out = runtime_dir.parent / "browser.jsonl"
    first, second = "https://example.com/first", "https://example.com/second"
    host = _asking(runtime_dir, out)
    relay_sock = runtime_dir / "relay.sock"
    try:
        line = json.dumps({"type": "open", "url": first}).encode() + b"\n"
        assert _ask(relay_sock, line)["action"] == "ask"
        host.wait_for(b"open it in the browser? [y/N] ")
        answer = _ask(relay_sock, json.dumps({"type": "open", "url": second}).encode() + b"\n")
        assert answer["ok"] is False
        assert str(answer["error"]).startswith(
            "the owner has not answered the question about an earlier open request"
        )
        os.write(host.master, b"y\r")
        host.wait_line(f"sandbridge: the sandbox opens {first}")
    finally:
        stderr = host.stop()  # waits for the browser command the answer started
    assert _recorded(out) == [[first]]
    assert second.encode() not in host.shown and second not in stderr


@pytest.mark.parametrize(("reply", "listens"), [(b"y\r", True), (b"\r", False)])
def test_a_logins_callback_port_is_taken_only_once_the_owner_says_yes(
    runtime_dir: Path, reply: bytes, listens: bool
) -> None:
    """``--oauth-callbacks`` with ``--open ask``: the owner's "y" is the approval; no port
    of the host listens for the sandbox before it, nor after a "no"."""
    out = runtime_dir.parent / "browser.jsonl"
    port = free_port()
    url = f"https://auth.example.com/authorize?redirect_uri=http://127.0.0.1:{port}/cb"
    host = OnTerminal(
        runtime_dir,
        *("--open", "ask", "--open-external", "allow", "--oauth-callbacks"),
        *("--browser", f"{PYTHON} {RECORDER} {out}"),
    )
    try:
        line = json.dumps({"type": "open", "url": url}).encode() + b"\n"
        assert _ask(runtime_dir / "relay.sock", line)["action"] == "ask"
        host.wait_for(b"open it in the browser? [y/N] ")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port)).close()
        os.write(host.master, reply)
        if listens:
            said = host.wait_line("sandbridge: the login's callback to")
            assert said == (
                f"sandbridge: the login's callback to http://127.0.0.1:{port}/cb is awaited "
                "on the host, once, for 600 s"
            )
            socket.create_connection(("127.0.0.1", port)).close()
        else:
            host.wait_line("sandbridge: not opened")
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port)).close()
    finally:
        host.stop()
    assert _recorded(out) == ([[url]] if listens else [])
