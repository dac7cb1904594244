"""The SSH transport against a real OpenSSH server (tests/remote/sshd.py).

The far command is a stand-in that, like ``serve-stdio``, speaks first (``R``) and then
echoes: ``cat``. Keys, configs and known_hosts are throwaway files; the real ``~/.ssh``
is never read.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import hashlib
import hmac
import http.client
import io
import json
import logging
import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from sandbridge.aio.tasks import running
from sandbridge.exceptions import RemoteLinkError, RemoteLinkRefused
from sandbridge.relay.host.local_peer import shared_owners
from sandbridge.remote.connect import Machine
from sandbridge.remote.ssh_transport import (
    Destination,
    SshLink,
    SshSettings,
    open_ssh_link,
    parse_destination,
    ssh_opener,
)
from tests.conftest import SANDBRIDGE, Process, app_host, free_port, host_port_of, request
from tests.remote.sshd import Sshd, known_hosts_line, sshd_in, start_agent, write_key
from tests.remote.test_connect import Far, read_far
from tests.support import command_in_process

ECHO = "printf R; exec cat"
# Keepalives of the dead-link tests: a request a second, dead after two unanswered.
KEEPALIVE = 1.0
KEEPALIVE_COUNT = 2

__all__ = ["read_far"]  # the far machine of the tests that only read from it, shared


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    yield from sshd_in(tmp_path / "far")


@pytest.fixture
def jump(tmp_path: Path) -> Iterator[Sshd]:
    yield from sshd_in(tmp_path / "jump")


def settings(server: Sshd, command: str = ECHO, **kwargs: float) -> SshSettings:
    chosen: dict[str, Any] = {"connect_timeout": 20.0, **kwargs}
    return SshSettings(config_paths=(server.config_path,), remote_command=command, **chosen)


def run(scenario: object) -> None:
    asyncio.run(asyncio.wait_for(scenario, 60))  # type: ignore[arg-type]


async def open_far(server: Sshd, command: str = ECHO, **kwargs: float) -> SshLink:
    return await open_ssh_link(Destination("far"), settings(server, command, **kwargs))


async def echo_through(link: SshLink, payload: bytes) -> bytes:
    """Write ``payload`` while reading back as many bytes (after the far ``R``)."""

    async def send() -> None:
        for start in range(0, len(payload), 65536):
            link.writer.write(payload[start : start + 65536])
            await link.writer.drain()

    async def receive() -> bytes:
        got = bytearray()
        while len(got) < len(payload) + 1:
            data = await link.reader.read(65536)
            assert data, f"the link ended after {len(got)} bytes"
            got += data
        return bytes(got)

    _, got = await asyncio.gather(send(), receive())
    return got


def open_fds() -> int:
    """Descriptors open now, after earlier tests' garbage has closed its own."""
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


def refusal(server: Sshd, *, command: str = ECHO, **kwargs: float) -> str:
    """The one-line error opening ``far`` fails with; nothing may be left open."""

    async def scenario() -> str:
        before = open_fds()
        with pytest.raises(RemoteLinkError) as caught:
            await open_far(server, command, **kwargs)
        assert open_fds() == before
        return str(caught.value)

    return asyncio.run(asyncio.wait_for(scenario(), 60))


# --- the destination -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("box", Destination("box")),
        ("alice@box.example", Destination("box.example", "alice")),
        ("alice@10.0.0.7:2222", Destination("10.0.0.7", "alice", 2222)),
        ("[::1]:22", Destination("::1", None, 22)),
        ("far_alias", Destination("far_alias")),
    ],
)
def test_destination_is_user_host_and_port(text: str, expected: Destination) -> None:
    assert parse_destination(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "-oProxyCommand=touch /tmp/x",
        "box extra",
        "alice@",
        "@box",
        "box:0",
        "box:99999",
        "a;b@box",
        "box\n",
        "[::1",
        "",
    ],
)
def test_destination_that_is_not_user_host_port_is_refused_by_name(text: str) -> None:
    with pytest.raises(RemoteLinkRefused, match="not"):
        parse_destination(text)


# --- through a real sshd -------------------------------------------------------------


def test_far_command_carries_bytes_both_ways_intact(sshd: Sshd) -> None:
    sshd.trust_host_key()
    sshd.write_client_config()
    payload = os.urandom(3 * 1024 * 1024) + bytes(range(256))

    async def scenario() -> None:
        link = await open_far(sshd)
        try:
            assert await echo_through(link, payload) == b"R" + payload
        finally:
            await link.close()

    run(scenario())


def test_opener_gives_the_transport_contracts_link(sshd: Sshd) -> None:
    sshd.trust_host_key()
    sshd.write_client_config()

    async def scenario() -> None:
        link = await ssh_opener("far", settings(sshd))()
        assert link.description == "ssh far"
        assert await link.reader.read(1) == b"R"
        link.writer.write(b"ping")
        await link.writer.drain()
        assert await link.reader.read(4) == b"ping"
        await link.close()
        await link.close()  # twice is harmless
        assert await link.reader.read(10) == b""

    run(scenario())


@pytest.mark.parametrize(
    ("config", "cipher"),
    [
        ("", "aes128-gcm@openssh.com"),  # ours: the fastest here
        ("Ciphers chacha20-poly1305@openssh.com", "chacha20-poly1305@openssh.com"),  # theirs
    ],
)
def test_owners_ciphers_win_over_the_preferred_ones(sshd: Sshd, config: str, cipher: str) -> None:
    sshd.trust_host_key()
    sshd.write_client_config("far", *([config] if config else []))

    async def scenario() -> str:
        link = await open_far(sshd)
        await link.close()
        return link.cipher

    assert asyncio.run(asyncio.wait_for(scenario(), 60)) == cipher


def test_user_and_port_may_be_given_without_a_config_alias(sshd: Sshd) -> None:
    sshd.trust_host_key()
    sshd.write_client_config("127.0.0.1")  # the key and known_hosts only; no alias

    async def scenario() -> None:
        target = Destination("127.0.0.1", sshd.user, sshd.port)
        link = await open_ssh_link(target, settings(sshd))
        assert await link.reader.read(1) == b"R"
        await link.close()

    run(scenario())


def test_unknown_host_key_is_refused_with_its_fingerprint(sshd: Sshd) -> None:
    sshd.write_client_config()  # no known_hosts at all
    message = refusal(sshd)
    assert f"[127.0.0.1]:{sshd.port}" in message
    assert sshd.host_key.get_fingerprint("sha256") in message
    assert "unknown" in message
    assert "refusing" in message


def test_changed_host_key_is_refused_as_changed(sshd: Sshd, tmp_path: Path) -> None:
    other = write_key(tmp_path / "impostor")
    sshd.known_hosts_path.write_text(known_hosts_line(sshd.port, other))
    sshd.write_client_config()
    message = refusal(sshd)
    assert "CHANGED" in message
    assert sshd.host_key.get_fingerprint("sha256") in message
    assert f"[127.0.0.1]:{sshd.port}" in message


def test_host_key_of_another_port_is_not_trusted_for_this_one(sshd: Sshd) -> None:
    sshd.known_hosts_path.write_text(known_hosts_line(sshd.port + 1, sshd.host_key))
    sshd.write_client_config()
    assert "unknown" in refusal(sshd)


def _hashed(host: str) -> str:
    """``host`` as ``ssh-keygen -H`` writes it: |1|salt|HMAC-SHA1(salt, host)."""
    salt = os.urandom(20)
    digest = hmac.new(salt, host.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def _public(key: asyncssh.SSHKey) -> str:
    return key.export_public_key().decode().strip()


@pytest.mark.parametrize(
    "lines",
    [
        # the right key, but revoked (also when another line lists it as trusted)
        ["@revoked * {key}", "{host} {key}"],
        # revoked for this port; a line for the bare host (port 22) must not bring it back
        ["@revoked {host} {key}", "127.0.0.1 {key}"],
        # a negated pattern excludes the host where the wildcard would list it
        ["!{host},* {key}"],
        # the bare host is port 22's entry, not this port's (OpenSSH looks up [host]:port)
        ["127.0.0.1 {key}"],
        # this port's entry for another name, a hashed entry of another port
        ["[127.0.0.2]:{port} {key}", "{hashed_other} {key}"],
    ],
    ids=["revoked", "revoked-for-the-port", "negated", "bare-host", "other-entries"],
)
def test_known_hosts_markers_and_patterns_do_not_trust_the_key(
    sshd: Sshd, lines: list[str]
) -> None:
    fields = {
        "key": _public(sshd.host_key),
        "host": f"[127.0.0.1]:{sshd.port}",
        "port": sshd.port,
        "hashed_other": _hashed(f"[127.0.0.1]:{sshd.port + 1}"),
    }
    sshd.known_hosts_path.write_text("".join(line.format(**fields) + "\n" for line in lines))
    sshd.write_client_config()
    assert "refusing" in refusal(sshd)


def test_a_key_known_only_for_the_address_a_name_resolves_to_is_not_trusted(
    sshd: Sshd,
) -> None:
    """OpenSSH looks the host key up by the name it connects to (HostName, or a
    HostKeyAlias), never by the address that name resolved to (CheckHostIP is off by
    default; on, an address only warns). asyncssh took a line for either: whoever made
    the name resolve to a machine of theirs that known_hosts lists by address (a
    compromised teammate's box once reached by IP; an mDNS answer on the LAN for
    `build-box.local`) was taken for the far machine."""
    sshd.known_hosts_path.write_text(known_hosts_line(sshd.port, sshd.host_key))
    with sshd.config_path.open("a") as config:
        config.write(
            "Host far\n  HostName localhost\n"
            f"  Port {sshd.port}\n  User {sshd.user}\n  IdentityFile {sshd.user_key_path}\n"
            "  IdentitiesOnly yes\n  IdentityAgent none\n"
            f"  UserKnownHostsFile {sshd.known_hosts_path}\n"
        )
    message = refusal(sshd)
    assert f"the host key of [localhost]:{sshd.port} is unknown" in message


def test_a_host_key_alias_is_looked_up_without_the_port(sshd: Sshd) -> None:
    """OpenSSH looks a HostKeyAlias up as it is, whatever the port."""
    sshd.known_hosts_path.write_text(f"build-box {_public(sshd.host_key)}\n")
    sshd.write_client_config("far", "  HostKeyAlias build-box")

    async def scenario() -> None:
        link = await open_far(sshd)
        try:
            assert await echo_through(link, b"alias") == b"R" + b"alias"
        finally:
            await link.close()

    run(scenario())


def test_a_cert_authority_line_does_not_trust_the_ca_key_as_a_host_key(sshd: Sshd) -> None:
    sshd.known_hosts_path.write_text(f"@cert-authority * {_public(sshd.host_key)}\n")
    sshd.write_client_config()
    refusal(sshd)  # refused (asyncssh then offers only certificate algorithms)


def test_a_hashed_known_hosts_entry_is_trusted_as_ssh_trusts_it(sshd: Sshd) -> None:
    line = f"{_hashed(f'[127.0.0.1]:{sshd.port}')} {_public(sshd.host_key)}\n"
    sshd.known_hosts_path.write_text(line)
    sshd.write_client_config()

    async def scenario() -> None:
        link = await open_far(sshd)
        try:
            assert await echo_through(link, b"hashed") == b"R" + b"hashed"
        finally:
            await link.close()

    run(scenario())


def test_known_hosts_none_in_the_config_trusts_nothing(sshd: Sshd) -> None:
    sshd.trust_host_key()
    # OpenSSH reads `none` as "no file": asyncssh alone would then check nothing.
    sshd.config_path.write_text("Host far\n  UserKnownHostsFile none\n")
    sshd.write_client_config()
    assert "unknown" in refusal(sshd)


def test_wrong_user_key_is_refused_as_an_authentication_failure(sshd: Sshd, tmp_path: Path) -> None:
    sshd.trust_host_key()
    write_key(tmp_path / "stranger")
    sshd.user_key_path = tmp_path / "stranger"
    sshd.write_client_config()
    message = refusal(sshd)
    assert message.startswith(
        f"SSH authentication to {sshd.user}@far (127.0.0.1:{sshd.port}) failed"
    )


def test_unreachable_host_is_a_one_line_error(sshd: Sshd) -> None:
    sshd.trust_host_key()
    port = free_port()
    sshd.config_path.write_text(f"Host far\n  Port {port}\n")
    sshd.write_client_config()

    async def scenario() -> None:
        with pytest.raises(RemoteLinkError) as caught:
            await open_far(sshd)
        assert not isinstance(caught.value, RemoteLinkRefused)  # worth retrying
        assert str(caught.value) == (
            f"far (127.0.0.1:{port}) is unreachable over SSH: Connection refused"
        )

    run(scenario())


def test_name_that_does_not_resolve_is_unreachable(sshd: Sshd) -> None:
    sshd.trust_host_key()
    sshd.config_path.write_text("Host far\n  HostName no-such-host.invalid\n")
    sshd.write_client_config()
    assert refusal(sshd).startswith("far (no-such-host.invalid:")


def test_server_that_never_speaks_ssh_times_out(sshd: Sshd) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        sshd.trust_host_key()
        sshd.config_path.write_text(f"Host far\n  Port {silent.getsockname()[1]}\n")
        sshd.write_client_config()
        message = refusal(sshd, connect_timeout=1.0)
    assert message.endswith("is unreachable: no SSH answer within 1 s")


def test_far_command_that_says_nothing_times_out(sshd: Sshd) -> None:
    sshd.trust_host_key()
    sshd.write_client_config()
    message = refusal(sshd, command="exec cat >/dev/null", connect_timeout=1.0)
    assert message == "'exec cat >/dev/null' on far said nothing within 1 s"


def test_missing_far_command_says_sandbridge_is_not_installed(sshd: Sshd) -> None:
    sshd.trust_host_key()
    sshd.write_client_config()
    message = refusal(sshd, command="sandbridge-not-installed-here serve-stdio")
    assert message.startswith("sandbridge is not installed on far or not on its PATH")


def test_far_command_that_fails_at_once_shows_its_stderr(sshd: Sshd) -> None:
    sshd.trust_host_key()
    sshd.write_client_config()
    message = refusal(sshd, command="echo 'no daemon here' >&2; exit 3")
    assert "ended before saying anything: no daemon here" in message


def test_proxy_jump_reaches_the_far_host_through_the_jump_host(sshd: Sshd, jump: Sshd) -> None:
    jump.trust_host_key()
    jump.write_client_config("hop")
    sshd.known_hosts_path.write_text(
        known_hosts_line(sshd.port, sshd.host_key) + known_hosts_line(jump.port, jump.host_key)
    )
    jump.known_hosts_path.write_text(sshd.known_hosts_path.read_text())
    sshd.config_path.write_text(jump.config_path.read_text())
    sshd.write_client_config("far", "ProxyJump hop")

    async def scenario() -> None:
        link = await open_far(sshd)
        try:
            assert await echo_through(link, b"through the jump") == b"Rthrough the jump"
        finally:
            await link.close()

    run(scenario())
    assert jump.process.wait_line("Accepted publickey", stream="stderr")


def test_unknown_jump_host_key_is_refused_naming_the_jump_host(sshd: Sshd, jump: Sshd) -> None:
    sshd.trust_host_key()
    jump.write_client_config("hop")  # the jump host's key is in no known_hosts
    sshd.config_path.write_text(jump.config_path.read_text())
    sshd.write_client_config("far", "ProxyJump hop")
    message = refusal(sshd)
    assert f"[127.0.0.1]:{jump.port}" in message
    assert jump.host_key.get_fingerprint("sha256") in message


def test_proxy_jump_loop_is_refused_before_connecting(sshd: Sshd) -> None:
    sshd.trust_host_key()
    sshd.config_path.write_text("Host hop\n  ProxyJump hop\n")
    sshd.write_client_config("far", "ProxyJump hop")
    message = refusal(sshd)
    assert message.startswith("ProxyJump for far goes through more than 8 hosts (a loop")


def test_killed_connection_ends_the_link_and_leaks_no_descriptors(sshd: Sshd) -> None:
    sshd.trust_host_key()
    sshd.write_client_config()

    async def scenario() -> None:
        before = open_fds()
        link = await open_far(sshd)
        assert await echo_through(link, b"x" * 100_000) == b"R" + b"x" * 100_000
        assert sshd.signal_sessions(signal.SIGKILL)
        assert await link.reader.read(65536) == b""
        with pytest.raises(RemoteLinkError, match="the SSH link to far broke"):
            await link.wait()
        await link.close()
        assert open_fds() == before

    run(scenario())


def test_frozen_far_side_is_noticed_within_the_keepalive_bound(
    sshd: Sshd, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sandbridge")
    sshd.trust_host_key()
    sshd.write_client_config()

    async def scenario() -> float:
        before = open_fds()
        link = await open_far(
            sshd, keepalive_interval=KEEPALIVE, keepalive_count_max=KEEPALIVE_COUNT
        )
        assert await echo_through(link, b"alive") == b"Ralive"
        assert sshd.signal_sessions(signal.SIGSTOP)
        frozen = time.monotonic()
        # Nothing answers and nothing closes: only the keepalives can notice.
        with pytest.raises(RemoteLinkError, match="the SSH link to far broke"):
            await link.wait()
        noticed = time.monotonic() - frozen
        assert await link.reader.read(1) == b""
        await link.close()
        assert open_fds() == before
        return noticed

    noticed = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert "remote.ssh_link_broke destination='far' reason=" in caplog.text
    # At most count+1 intervals (the first keepalive waits a whole one), plus slack.
    assert noticed < KEEPALIVE * (KEEPALIVE_COUNT + 1) + 2.0


def test_agent_key_logs_in_and_the_agent_is_not_forwarded(sshd: Sshd, tmp_path: Path) -> None:
    sshd.trust_host_key()
    agent = start_agent(tmp_path, sshd.user_key_path)  # the only key sshd accepts
    try:
        write_key(tmp_path / "stranger")
        sshd.user_key_path = tmp_path / "stranger"
        sshd.config_path.write_text(
            f"Host far\n  IdentityAgent {tmp_path / 'agent.sock'}\n  IdentitiesOnly no\n"
            "  ForwardAgent yes\n  RequestTTY force\n"
        )
        sshd.write_client_config()
        # The far side says whether it got an agent socket and a terminal.
        command = 'printf "R%s|" "${SSH_AUTH_SOCK:-unset}"; [ -t 0 ] && echo tty || echo notty'

        async def scenario() -> bytes:
            link = await open_far(sshd, command)
            said = b""
            while data := await link.reader.read(1024):
                said += data
            await link.close()
            return said

        assert asyncio.run(asyncio.wait_for(scenario(), 60)) == b"Runset|notty\n"
    finally:
        agent.stop()


# --- sandbridge connect over SSH, to a far serve-stdio --------------------------------


class _Lines(io.StringIO):
    """``connect``'s messages, each line kept; :meth:`wait_for` waits on their arrival."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.arrived = asyncio.Event()

    def write(self, text: str) -> int:
        self.lines += text.splitlines()
        self.arrived.set()
        return super().write(text)

    async def wait_for(self, prefix: str, count: int = 1) -> str:
        """The ``count``-th line starting with ``prefix``, once it has arrived."""
        while True:
            found = [line for line in self.lines if line.startswith(prefix)]
            if len(found) >= count:
                return found[count - 1]
            self.arrived.clear()
            await self.arrived.wait()


def test_connect_over_ssh_serves_a_far_app_as_a_local_origin(
    sshd: Sshd, read_far: Far, localhost_names_resolve: None
) -> None:
    far = read_far  # the module's far machine: this connection, not the far, is cut
    sshd.trust_host_key()
    sshd.write_client_config()
    # sshd starts the far command with its own environment: the far session's runtime
    # dir comes on the command line, as `far.serve_stdio` gives it.
    open_link = ssh_opener("far", settings(sshd, far.serve_stdio))

    async def scenario() -> None:
        shared_owners()  # the process's one netlink socket, kept for its lifetime
        before = open_fds()
        lines = _Lines()
        machine = Machine("far", open_link, out=lines)
        async with running(machine.run()):
            app = await lines.wait_for(f"sandbridge: far: {far.session} port {far.echo_port} -> ")
            assert "sandbridge: far: connected (ssh far)" in lines.lines
            port = host_port_of(app.rsplit(" ", 1)[1])
            status, _, body = await asyncio.to_thread(request, port, "GET", "/over-ssh")
            assert (status, json.loads(body)["path"]) == (200, "/over-ssh")
            # The SSH connection dies mid-download: the download ends short (it does not
            # hang), connect reconnects over a new connection, and the app is back at
            # the same local origin.
            download = await asyncio.to_thread(start_download, port)
            assert sshd.signal_sessions(signal.SIGKILL)
            assert await asyncio.to_thread(rest_of_download, download) < DOWNLOAD_BYTES
            await lines.wait_for("sandbridge: far: link lost")
            await lines.wait_for("sandbridge: far: connected (ssh far)", count=2)
            status, _, body = await asyncio.to_thread(request, port, "GET", "/again")
            assert (status, json.loads(body)["path"]) == (200, "/again")
        assert open_fds() == before

    asyncio.run(asyncio.wait_for(scenario(), 60))


DOWNLOAD_BYTES = 100 * 1024 * 1024


Download = tuple[http.client.HTTPConnection, http.client.HTTPResponse]


def start_download(port: int) -> Download:
    """A 100 MiB GET from the far echo app, once its first MiB has arrived."""
    conn = http.client.HTTPConnection(app_host(port), port, timeout=30)
    conn.request("GET", f"/bytes?n={DOWNLOAD_BYTES}")
    response = conn.getresponse()
    assert response.status == 200
    assert len(response.read(1024 * 1024)) == 1024 * 1024
    return conn, response


def rest_of_download(download: Download) -> int:
    """Bytes received in all when the download ended, however it ended."""
    conn, response = download
    got = 1024 * 1024
    try:
        while chunk := response.read(1024 * 1024):
            got += len(chunk)
    except (http.client.IncompleteRead, ConnectionError):
        pass
    finally:
        response.close()
        conn.close()
    return got


# --- a hostile SSH server ------------------------------------------------------------

EVIL = "\x1b]0;owned\x07\x1b[2J"


class _Hostile(asyncssh.SSHServer):
    """asyncssh's own server side, saying what a compromised far machine could say."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn

    def begin_auth(self, username: str) -> bool:
        if self.how == "disconnect":
            assert self.conn is not None
            self.conn.disconnect(asyncssh.DISC_BY_APPLICATION, f"go away {EVIL}")
        return False  # no authentication needed

    def session_requested(self) -> bool:
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, f"no {EVIL}")


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("disconnect", "SSH to far (127.0.0.1:{port}) failed: go away ?]0;owned??[2J (error 11)"),
        ("refuse_session", "far refused to run 'printf R; exec cat': no ?]0;owned??[2J"),
    ],
)
def test_hostile_server_words_reach_the_owner_without_control_characters(
    tmp_path: Path, how: str, expected: str
) -> None:
    host_key = write_key(tmp_path / "host_key")
    write_key(tmp_path / "user_key")

    async def scenario() -> str:
        server = await asyncssh.create_server(
            lambda: _Hostile(how), "127.0.0.1", 0, server_host_keys=[host_key]
        )
        port = server.sockets[0].getsockname()[1]
        (tmp_path / "known_hosts").write_text(known_hosts_line(port, host_key))
        config = tmp_path / "config"
        config.write_text(
            f"Host far\n  HostName 127.0.0.1\n  Port {port}\n  User someone\n"
            f"  IdentityFile {tmp_path / 'user_key'}\n  IdentityAgent none\n"
            f"  UserKnownHostsFile {tmp_path / 'known_hosts'}\n"
        )
        try:
            with pytest.raises(RemoteLinkError) as caught:
                await open_ssh_link(
                    Destination("far"), SshSettings(config_paths=(config,), remote_command=ECHO)
                )
        finally:
            server.close()
            await server.wait_closed()
        return str(caught.value).replace(str(port), "{port}")

    assert asyncio.run(asyncio.wait_for(scenario(), 60)) == expected


# --- the command line: sandbridge connect HOST ---------------------------------------


def connect_command(sshd: Sshd, remote_command: str) -> list[str]:
    return [
        *SANDBRIDGE, "connect", "far", "-F", str(sshd.config_path),
        "--remote-command", remote_command,
    ]  # fmt: skip


def test_sandbridge_connect_host_serves_the_far_app_and_ls_names_the_ssh_link(
    sshd: Sshd, read_far: Far, tmp_path: Path, localhost_names_resolve: None
) -> None:
    far = read_far  # the module's far machine, only read from
    sshd.trust_host_key()
    sshd.write_client_config()
    laptop_xdg = tmp_path / "laptop-xdg"
    laptop_xdg.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(laptop_xdg)}
    connect = Process(connect_command(sshd, far.serve_stdio), env=env)
    try:
        line = connect.wait_line(
            f"sandbridge: far: {far.session} port {far.echo_port} -> ", "stderr"
        )
        port = host_port_of(line.rsplit(" ", 1)[1])
        status, _, body = request(port, path="/from-the-cli")
        assert (status, json.loads(body)["path"]) == (200, "/from-the-cli")
        # What ls lists, in this process (tests/support/command_in_process.py).
        listing = command_in_process.sandbridge("ls", env=env)
        assert listing.returncode == 0, listing.stderr
        assert "ssh far" in listing.stdout
    finally:
        assert connect.stop() == 0


def test_sandbridge_connect_to_an_unknown_host_key_exits_at_once_naming_its_fingerprint(
    sshd: Sshd,
) -> None:
    sshd.write_client_config()  # known_hosts stays empty: the far key is unknown
    # The far command is never run (the key is refused first): no far machine behind it.
    never_run = shlex.join([*SANDBRIDGE, "serve-stdio"])
    result = subprocess.run(
        connect_command(sshd, never_run), capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1, result.stderr
    assert "SHA256:" in result.stderr and "far" in result.stderr, result.stderr
