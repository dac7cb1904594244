"""The registration server on a real Unix socket."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.aio import event_loop
from sandbridge.protocol.limits import REGISTRATION_READ_TIMEOUT, RELAY_SOCKET_RATE
from sandbridge.protocol.registration import REQUEST_TYPES
from sandbridge.relay.host.registration_server import RegistrationServer
from tests.conftest import HELPER, Relay, echo, host_port_of, module_relay


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relay]:
    """One relay for the module: each test registers apps of its own."""
    with module_relay(tmp_path_factory) as relay:
        yield relay


@pytest.fixture(scope="module")
def app_port(shared_app_port: int) -> int:
    return shared_app_port


def _ask(path: Path, data: bytes, shutdown: bool = False) -> dict[str, object]:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(15)
        sock.connect(str(path))
        sock.sendall(data)
        if shutdown:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.endswith(b"\n") and answer.count(b"\n") == 1
    value: dict[str, object] = json.loads(answer)
    return value


def test_contract_request_gets_the_contract_answer_in_the_ip_form(
    runtime_dir: Path, app_port: int
) -> None:
    relay = Relay(runtime_dir, host_args=("--url-form", "ip"))
    try:
        answer = _ask(
            relay.runtime_dir / "relay.sock",
            json.dumps({"type": "register", "port": app_port, "base_path": "/"}).encode() + b"\n",
        )
        assert set(answer) == {"ok", "host_port", "base_path", "url"}
        assert answer["ok"] is True
        assert answer["url"] == f"http://127.0.0.1:{answer['host_port']}/"
        port = host_port_of(str(answer["url"]))
        assert echo(port)["server_port"] == app_port
    finally:
        relay.stop()


def test_contract_request_gets_the_contract_fields_and_a_label_url(
    relay: Relay, app_port: int
) -> None:
    answer = _ask(
        relay.runtime_dir / "relay.sock",
        json.dumps({"type": "register", "port": app_port, "base_path": "/"}).encode() + b"\n",
    )
    assert set(answer) == {"ok", "host_port", "base_path", "url"}
    assert answer["ok"] is True
    assert re.fullmatch(
        rf"http://[a-z2-7]{{26}}\.localhost:{answer['host_port']}/", str(answer["url"])
    )
    assert echo(host_port_of(str(answer["url"])))["server_port"] == app_port


def test_request_ended_by_shutdown_instead_of_newline_works(relay: Relay, app_port: int) -> None:
    answer = _ask(
        relay.runtime_dir / "relay.sock",
        json.dumps({"type": "register", "port": app_port}).encode(),
        shutdown=True,
    )
    assert answer["ok"] is True


@pytest.mark.parametrize(
    ("message", "fragment"),
    [
        (b'{"type":"register","port":0}\n', "port must be an integer 1..65535, got 0"),
        (b'{"type":"register","port":"x"}\n', "got 'x'"),
        (b'{"type":"register","port":80,"base_path":"/a/../b"}\n', "'/a/../b'"),
        (b'{"type":"register","port":80,"base_path":"/a b"}\n', "'/a b'"),
        (b'{"type":"register","port":80,"base_path":"/a?b"}\n', "'/a?b'"),
        (b"garbage\n", "not valid JSON"),
        (b'{"type":"register","port":80,"pad":"' + b"x" * 5000 + b'"}\n', "longer than 4096"),
        (b"[" * 2000 + b"]" * 2000 + b"\n", "nested deeper than 32 levels"),
        (b'{"a":' * 600 + b"1" + b"}" * 600 + b"\n", "nested deeper than 32 levels"),
        (b"[" * 100_000 + b"\n", "longer than 4096"),
    ],
)
def test_invalid_registration_gets_its_documented_error(
    relay: Relay, message: bytes, fragment: str
) -> None:
    answer = _ask(relay.runtime_dir / "relay.sock", message)
    assert answer["ok"] is False
    assert fragment in str(answer["error"])


def test_the_server_keeps_registering_after_a_deeply_nested_request(
    relay: Relay, app_port: int
) -> None:
    answer = _ask(relay.runtime_dir / "relay.sock", b"[" * 2000 + b"]" * 2000 + b"\n")
    assert answer["ok"] is False
    answer = _ask(
        relay.runtime_dir / "relay.sock",
        json.dumps({"type": "register", "port": app_port}).encode() + b"\n",
    )
    assert answer["ok"] is True


def test_client_that_never_sends_is_answered_after_the_timeout(tmp_path: Path) -> None:
    """On a server of its own, with a read timeout of 0.25 s (the relay's: 5 s)."""

    async def scenario() -> dict[str, object]:
        async def register(request: object) -> object:
            raise AssertionError("no complete request is sent")

        server = RegistrationServer(
            tmp_path / "relay.sock",
            register,  # type: ignore[arg-type]
            read_timeout=0.25,
        )
        await server.start()
        try:
            return await asyncio.to_thread(_ask, tmp_path / "relay.sock", b'{"type":')
        finally:
            await server.close()

    answer = event_loop.run(scenario())
    assert answer == {"ok": False, "error": "no complete request within 0.25 s"}


def test_a_relay_gives_a_request_the_documented_five_seconds() -> None:
    """docs/contract.md's error table: ``no complete request within 5 s``."""
    server = RegistrationServer(Path("relay.sock"), print)  # type: ignore[arg-type]
    assert server.read_timeout == REGISTRATION_READ_TIMEOUT == 5.0


def test_sockets_are_0600_and_dir_0700(relay: Relay) -> None:
    assert stat.S_IMODE(os.stat(relay.runtime_dir).st_mode) == 0o700
    for name in ("relay.sock", "upstream.sock"):
        assert stat.S_IMODE(os.stat(relay.runtime_dir / name).st_mode) == 0o600


def test_helper_prints_the_url(relay: Relay, app_port: int) -> None:
    url = relay.register(app_port, "/app/")
    assert re.fullmatch(r"http://[a-z2-7]{26}\.localhost:[0-9]+/app", url)
    assert echo(host_port_of(url), "/x")["path"] == "/app/x"


def test_helper_reports_a_refusal_and_exits_1(relay: Relay) -> None:
    result = subprocess.run(
        [*HELPER, "70000"], env=relay.env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert "port must be an integer 1..65535, got 70000" in result.stderr


def test_sigterm_stops_the_host_and_removes_its_socket(runtime_dir: Path) -> None:
    relay = Relay(runtime_dir)
    assert relay.host.stop() == 128 + 15
    assert relay.shim.stop() == 128 + 15
    assert not (runtime_dir / "relay.sock").exists()
    assert runtime_dir.exists()  # adopted, not created: the host leaves the dir itself


# --- auto-publish's additions (docs/contract.md#auto-publish-sandbridges-own-optional) --


def test_a_register_with_a_process_name_gets_the_contract_answer(
    relay: Relay, app_port: int
) -> None:
    answer = _ask(
        relay.runtime_dir / "relay.sock",
        json.dumps({"type": "register", "port": app_port, "process": "node"}).encode() + b"\n",
    )
    assert set(answer) == {"ok", "host_port", "base_path", "url"}
    assert echo(host_port_of(str(answer["url"])))["server_port"] == app_port


def test_an_auto_register_is_refused_where_the_owner_publishes_nothing(relay: Relay) -> None:
    answer = _ask(relay.runtime_dir / "relay.sock", b'{"type":"register","port":80,"auto":true}\n')
    assert answer == {
        "ok": False,
        "error": "port 80: this session does not auto-publish (no publish = auto or range); "
        'register without "auto"',
    }


def test_unregister_of_a_contract_registration_is_refused_and_the_app_stays(
    relay: Relay, app_port: int
) -> None:
    host_port = host_port_of(relay.register(app_port))
    answer = _ask(
        relay.runtime_dir / "relay.sock",
        json.dumps({"type": "unregister", "host_port": host_port}).encode() + b"\n",
    )
    assert answer == {
        "ok": False,
        "error": f'host port {host_port} was not registered with "auto":true; only '
        "auto-published apps can be unregistered",
    }
    assert echo(host_port)["server_port"] == app_port


def test_an_unknown_type_is_refused_naming_every_type_the_socket_accepts(relay: Relay) -> None:
    answer = _ask(relay.runtime_dir / "relay.sock", b'{"type":"deregister","host_port":1}\n')
    assert answer == {
        "ok": False,
        "error": "type must be 'register', 'open' or 'unregister', got 'deregister'",
    }
    # Derived from the parsers' table: a type added there is named here too.
    assert all(f"'{kind}'" in str(answer["error"]) for kind in REQUEST_TYPES)


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (
            b'{"type":"unregister"}\n',
            "host_port is missing: send the integer port of the app's URL",
        ),
        (
            b'{"type":"unregister","host_port":-1}\n',
            "host_port must be an integer 1..65535, got -1",
        ),
        (b'{"type":"unregister","host_port":1}\n', "no app of this session has host port 1"),
        (b'{"type":"unregister","host_port":1,"pad":"' + b"x" * 5000 + b'"}\n', "message longer"),
    ],
)
def test_invalid_unregister_gets_its_documented_error(
    relay: Relay, message: bytes, error: str
) -> None:
    answer = _ask(relay.runtime_dir / "relay.sock", message)
    assert answer["ok"] is False
    assert str(answer["error"]).startswith(error)


def test_a_burst_of_connections_waits_in_the_backlog_not_refused(tmp_path: Path) -> None:
    """The event loop listens again with its own default backlog (100) unless told: a
    sandbox's burst of connections then made the agent's next registration fail with
    EAGAIN while the host was busy. 300 connections made while the loop cannot accept
    all wait their turn."""

    async def scenario() -> int:
        async def register(request: object) -> object:
            raise AssertionError("no request is sent")

        server = RegistrationServer(tmp_path / "relay.sock", register)  # type: ignore[arg-type]
        await server.start()
        clients = []
        try:
            for _ in range(300):  # the loop runs no callback meanwhile: nothing is accepted
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                client.setblocking(False)
                client.connect(str(tmp_path / "relay.sock"))  # BlockingIOError if full
                clients.append(client)
            return len(clients)
        finally:
            for client in clients:
                client.close()
            await server.close()

    assert event_loop.run(scenario()) == 300


FLOOD = """
import socket, sys, time
end, answered = time.monotonic() + float(sys.argv[2]), 0
while time.monotonic() < end:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(sys.argv[1])
        sock.sendall(b"not json\\n")
        answered += bool(sock.recv(4096))
print(answered)
"""


def test_a_connection_flood_costs_the_host_no_more_than_its_rate(tmp_path: Path) -> None:
    """A sandbox that connects as fast as it can, each request refused at once, had the
    host answer 9,000 a second (most of a core, on a loop a daemon shares with every
    session); accepted at RELAY_SOCKET_RATE, the rest wait in the backlog."""
    seconds = 2.0

    async def scenario() -> tuple[float, int]:
        async def register(request: object) -> object:
            raise AssertionError("no valid request is sent")

        server = RegistrationServer(tmp_path / "relay.sock", register)  # type: ignore[arg-type]
        await server.start()
        flood = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            FLOOD,
            str(tmp_path / "relay.sock"),
            str(seconds),
            stdout=asyncio.subprocess.PIPE,
        )
        cpu = time.process_time()
        try:
            out, _ = await flood.communicate()
        finally:
            await server.close()
        return time.process_time() - cpu, int(out)

    cpu, answered = event_loop.run(scenario())
    assert answered <= RELAY_SOCKET_RATE * (seconds + 1)
    assert cpu < seconds / 4, f"{cpu:.2f} s of the host's CPU for {answered} refusals"
