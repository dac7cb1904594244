"""App connections the host owns alone: a sandbox holds no copy of them, so it cannot
make them blocking and stall the host's event loop; the socket minter that makes them
is a host process the sandbox cannot see, and it ends with the session."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import http.client
import json
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbridge.exceptions import StreamRefused, UpstreamError
from sandbridge.relay.host import owned_upstream
from sandbridge.relay.host.owned_upstream import OwnedUpstream, PendingOwnedUpstream
from tests.conftest import (
    ECHO_APP,
    NOBODY,
    PYTHON,
    REPO,
    STARTS_A_SANDBOX,
    Nobody,
    Process,
    app_host,
    host_field,
    host_port_of,
    run_argv,
)
from tests.support.loopback_ports import bound_only, on_ipv6_loopback_and

FLAG_THIEF = str(REPO / "tests" / "apps" / "flag_thief.py")
# ioctl(2) on a socket: a descriptor of the network namespace it was created in.
SIOCGSKNS = 0x894C
# How long another app's request may take while one app is being attacked: far more
# than it takes on a loaded machine, far less than never.
ANSWER_BOUND = 10.0
# An upload larger than every socket buffer between the browser and the app.
UPLOAD_BYTES = 256 * 1024 * 1024


def get_within(port: int, timeout: float) -> int:
    """The status of one GET on a fresh connection, or an error after ``timeout``."""
    conn = http.client.HTTPConnection(app_host(port), port, timeout=timeout)
    try:
        conn.request("GET", "/")
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def upload_forever(port: int) -> socket.socket:
    """A browser connection that uploads more than every buffer holds, from a thread,
    until the connection is closed."""
    sock = socket.create_connection(("127.0.0.1", port))
    head = (
        b"POST /upload HTTP/1.1\r\nHost: " + host_field(port) + b"\r\n"
        b"Content-Length: " + str(UPLOAD_BYTES).encode() + b"\r\n\r\n"
    )
    sock.sendall(head)

    def send() -> None:
        chunk = bytes(64 * 1024)
        with contextlib.suppress(OSError):
            for _ in range(UPLOAD_BYTES // len(chunk)):
                sock.sendall(chunk)

    threading.Thread(target=send, daemon=True).start()
    return sock


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    work, xdg = tmp_path / "work", tmp_path / "xdg"
    work.mkdir()
    xdg.mkdir(mode=0o700)
    os.mkfifo(work / "release")
    return work, xdg


@STARTS_A_SANDBOX
def test_a_sandbox_that_makes_an_app_socket_blocking_stalls_no_other_app(
    backend: str, dirs: tuple[Path, Path]
) -> None:
    work, xdg = dirs
    process = Process(
        run_argv(work, PYTHON, FLAG_THIEF, "4173", "4174", options=("--backend", backend)),
        env={**os.environ, "XDG_RUNTIME_DIR": str(xdg)},
    )
    uploading: socket.socket | None = None
    try:
        urls = json.loads(process.wait_line("READY", timeout=60).removeprefix("READY "))
        good = host_port_of(urls["good_url"])
        assert get_within(good, ANSWER_BOUND) == 200
        uploading = upload_forever(host_port_of(urls["victim_url"]))
        process.wait_line("CLEARED ")
        # The host now writes to an app that reads nothing more; the other app answers.
        for _ in range(3):
            assert get_within(good, ANSWER_BOUND) == 200
        # The shim's handoff was never asked for: the sandbox held no app connection.
        uploading.close()
        (work / "release").write_text("go")
        assert process.wait_line("HANDOFFS ") == "HANDOFFS 0"
        assert process.popen.wait(30) == 0, process.drain()
    finally:
        if uploading is not None:
            uploading.close()
        try:
            process.stop()
        except subprocess.TimeoutExpired:  # a stalled host does not see its SIGTERM
            process.popen.kill()
            process.popen.wait()


def minter_of(run_pid: int) -> int:
    """The socket minter among the children of ``sandbridge run`` (PID ``run_pid``)."""
    children = Path(f"/proc/{run_pid}/task/{run_pid}/children").read_text().split()
    minters = [
        int(pid)
        for pid in children
        if b"socket_minter" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    assert len(minters) == 1, children
    return minters[0]


def assert_minter_isolated(minter: int, sandbox: Process) -> None:
    """The minter has no capabilities and no way to gain them, lives in the sandbox's
    network namespace but the host's PID and mount namespaces, and is not among the
    processes the sandbox sees (its ``SEEN`` line, from :data:`SANDBOX_VIEW`)."""
    status = Path(f"/proc/{minter}/status").read_text()
    assert "\nCapEff:\t0000000000000000\n" in status
    assert "\nNoNewPrivs:\t1\n" in status
    sandbox_seen = json.loads(sandbox.wait_line("SEEN ").removeprefix("SEEN "))
    assert not [cmd for cmd in sandbox_seen if "socket_minter" in cmd]
    for kind in ("pid", "mnt"):
        assert os.readlink(f"/proc/{minter}/ns/{kind}") == os.readlink(f"/proc/self/ns/{kind}")
    assert os.readlink(f"/proc/{minter}/ns/net") != os.readlink("/proc/self/ns/net")


SANDBOX_VIEW = """
import json, os, subprocess, sys
subprocess.run(["ags-webview-url", "4173"], check=True, capture_output=True)
seen = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            seen.append(open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace"))
        except OSError:
            pass
print("SEEN " + json.dumps(seen), flush=True)
open("release").read()
"""


@STARTS_A_SANDBOX
def test_the_minter_is_a_host_process_the_sandbox_cannot_see_and_ends_with_it(
    backend: str, dirs: tuple[Path, Path]
) -> None:
    work, xdg = dirs
    process = Process(
        run_argv(work, PYTHON, "-c", SANDBOX_VIEW, options=("--backend", backend)),
        env={**os.environ, "XDG_RUNTIME_DIR": str(xdg)},
    )
    try:
        line = process.wait_line("sandbridge: sandbox port 4173 -> ", "stderr", timeout=60)
        port = host_port_of(line.rsplit(" ", 1)[1])
        # Nothing listens on 4173 inside: the answer is the shim's refusal, as before.
        conn = http.client.HTTPConnection(app_host(port), port, timeout=ANSWER_BOUND)
        conn.request("GET", "/")
        response = conn.getresponse()
        assert response.status == 502
        assert b"could not reach sandbox port 4173" in response.read()
        conn.close()
        minter = minter_of(process.popen.pid)
        assert_minter_isolated(minter, process)
        (work / "release").write_text("go")
        assert process.popen.wait(30) == 0
        # Reaped by the session before it returned: gone, not a zombie.
        assert not Path(f"/proc/{minter}").exists()
    finally:
        process.stop()


NAMESPACE_SERVER = """
import socket, sys, threading
from sandbridge.sandbox.net_init import loopback_up
loopback_up()
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)

def serve():
    while True:
        conn, _ = server.accept()
        conn.sendall(b"inside")
        conn.close()

threading.Thread(target=serve, daemon=True).start()
sys.stdin.read()
"""


@pytest.fixture
def namespace() -> Iterator[tuple[int, int]]:
    """A network namespace of its own (in a user namespace of its own, as the backends
    make it), with a server on a port there that says ``inside``: (descriptor, port)."""
    server = subprocess.Popen(
        ["unshare", "--user", "--map-root-user", "--net", PYTHON, "-c", NAMESPACE_SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        port = server.stdout.readline().strip()
        assert port.isdigit(), "the namespace's server did not start"
        fd = os.open(f"/proc/{server.pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            yield fd, int(port)
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
    finally:
        server.stdin.close()
        assert server.wait(30) == 0


def test_minted_sockets_are_tcp_sockets_of_the_sandbox_namespace(
    namespace: tuple[int, int],
) -> None:
    fd, port = namespace
    expected = os.fstat(fd)

    async def main() -> None:
        owned = await OwnedUpstream.start(os.dup(fd))
        try:
            assert owned.minter_pid is not None
            sockets = [await owned._socket() for _ in range(owned_upstream.POOL_SIZE + 2)]
            for sock in sockets:
                assert sock.family == socket.AF_INET6 and sock.type == socket.SOCK_STREAM
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_PROTOCOL) == socket.IPPROTO_TCP
                ns = fcntl.ioctl(sock.fileno(), SIOCGSKNS)
                seen = os.fstat(ns)
                os.close(ns)
                assert (seen.st_dev, seen.st_ino) == (expected.st_dev, expected.st_ino)
                assert not sock.getblocking()
                sock.close()
            channel = await owned.open(port)
            assert await channel.read() == b"inside"
            channel.abort()
        finally:
            await owned.close()
        assert owned._process is not None and owned._process.returncode == 0

    asyncio.run(main())


def test_a_port_nothing_listens_on_inside_is_refused_as_the_shim_refuses_it(
    namespace: tuple[int, int],
) -> None:
    fd = os.dup(namespace[0])
    # The same port on the host's side listens: the host never reaches it.
    with socket.create_server(("127.0.0.1", 0)) as outside:
        port = outside.getsockname()[1]

        async def main() -> None:
            owned = await OwnedUpstream.start(fd)
            try:
                with pytest.raises(StreamRefused, match=f"could not reach sandbox port {port}: "):
                    await owned.open(port)
            finally:
                await owned.close()

        asyncio.run(main())


def test_the_hosts_own_namespace_needs_no_minter() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:

        async def main() -> None:
            owned = await OwnedUpstream.start(os.open("/proc/self/ns/net", os.O_RDONLY))
            try:
                assert owned.minter_pid is None
                channel = await owned.open(server.getsockname()[1])
                channel.abort()
            finally:
                await owned.close()

        asyncio.run(main())


def test_an_app_on_ipv6_loopback_only_is_reached_once_127_0_0_1_refuses() -> None:
    # 127.0.0.1 at the same port is held (bound, not listening: it refuses), so that no
    # other test's process can listen there and answer in the app's place.
    server, held = on_ipv6_loopback_and(bound_only)
    with server, held:

        async def main() -> None:
            owned = await OwnedUpstream.start(os.open("/proc/self/ns/net", os.O_RDONLY))
            try:
                channel = await owned.open(server.getsockname()[1])
                channel.abort()
            finally:
                await owned.close()

        asyncio.run(main())


def test_a_port_nothing_listens_on_is_refused_naming_each_address_tried() -> None:
    with socket.socket() as reserved:  # bound, not listening: connections are refused
        reserved.bind(("127.0.0.1", 0))
        port = reserved.getsockname()[1]

        async def main() -> None:
            owned = await OwnedUpstream.start(os.open("/proc/self/ns/net", os.O_RDONLY))
            try:
                with pytest.raises(StreamRefused) as refused:
                    await owned.open(port)
            finally:
                await owned.close()
            assert str(refused.value) == (
                f"could not reach sandbox port {port}: "
                f"connect to 127.0.0.1:{port} failed: [Errno 111] Connection refused; "
                f"connect to [::1]:{port} failed: [Errno 111] Connection refused"
            )

        asyncio.run(main())


def test_a_namespace_that_is_not_a_network_one_is_refused() -> None:
    host_end, entry_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    user = os.open("/proc/self/ns/user", os.O_RDONLY)
    entry_end.sendmsg([b"n"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, user.to_bytes(4, "little"))])
    os.close(user)
    entry_end.close()

    async def main() -> None:
        pending = PendingOwnedUpstream(host_end)
        assert await pending.get() is None  # logged; the session takes the shim's handoff
        await pending.close()

    asyncio.run(main())
    assert host_end.fileno() == -1  # read once, then closed


def test_an_entry_that_sends_nothing_leaves_the_handoff() -> None:
    host_end, entry_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    entry_end.close()

    async def main() -> None:
        with pytest.raises(UpstreamError, match="sent 0 namespace descriptors"):
            await owned_upstream.receive_namespace(host_end)

    host_end.setblocking(False)
    asyncio.run(main())
    host_end.close()


def test_a_minter_that_cannot_start_leaves_the_handoff_and_says_so(
    namespace: tuple[int, int],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsenter
    host_end, entry_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    rights = namespace[0].to_bytes(4, "little")
    entry_end.sendmsg([b"n"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
    entry_end.close()

    async def main() -> None:
        pending = PendingOwnedUpstream(host_end)
        assert await pending.get() is None
        await pending.close()

    with caplog.at_level("WARNING", logger="sandbridge"):
        asyncio.run(main())
    assert any(
        "upstream.owned_unavailable" in line and "nsenter: not found" in line
        for line in caplog.messages
    ), caplog.messages


@STARTS_A_SANDBOX
def test_an_unprivileged_owner_gets_its_minter_too(backend: str, nobody: Nobody) -> None:
    # nsenter into a user namespace the owner's uid made needs no privilege of the host.
    process = Process(
        [*nobody.run_argv(backend), "--", "/usr/bin/python3", ECHO_APP, "--register", "4173"],
        env=nobody.env,
        cwd=str(nobody.work),
    )
    try:
        report = json.loads(process.wait_line("READY", timeout=60).removeprefix("READY "))
        port = host_port_of(str(report["urls"][0]))
        assert get_within(port, ANSWER_BOUND) == 200
        minter = minter_of(process.popen.pid)
        status = Path(f"/proc/{minter}/status").read_text()
        assert f"\nUid:\t{NOBODY}\t" in status
        assert "\nCapEff:\t0000000000000000\n" in status
        assert os.readlink(f"/proc/{minter}/ns/pid") == os.readlink("/proc/self/ns/pid")
    finally:
        process.stop()
    assert not [line for line in process.lines["stderr"] if "owned_unavailable" in line]


def test_a_minter_that_fails_to_start_is_refused_never_the_handoff_then_started_again(
    namespace: tuple[int, int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A minter that could not start (here an nsenter that fails; in an attack the owner's
    # process limit, which the sandbox fills with processes of its own) left the session
    # on the shim's handoff: the hole the minter closes, opened again at will.
    tries = tmp_path / "tries"
    failing = tmp_path / "bin"
    failing.mkdir()
    (failing / "nsenter").write_text(f"#!/bin/sh\necho try >> {tries}\nexit 1\n")
    (failing / "nsenter").chmod(0o755)
    real_path = os.environ["PATH"]
    monkeypatch.setenv("PATH", f"{failing}{os.pathsep}{real_path}")
    host_end, entry_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    rights = namespace[0].to_bytes(4, "little")
    entry_end.sendmsg([b"n"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
    entry_end.close()

    async def main() -> None:
        pending = PendingOwnedUpstream(host_end, retry_seconds=3600)
        try:
            with pytest.raises(UpstreamError, match="the socket minter could not start: "):
                await pending.get()
            # Within the retry interval: refused at once, no minter spawned.
            with pytest.raises(UpstreamError, match="the socket minter could not start: "):
                await pending.get()
            assert tries.read_text().count("try") == 1
            pending._retry_at = 0.0  # the interval is over
            with pytest.raises(UpstreamError):
                await pending.get()
            assert tries.read_text().count("try") == 2
            # Once a minter can start, the session has its owned upstream after all.
            os.environ["PATH"] = real_path
            pending._retry_at = 0.0
            owned = await pending.get()
            assert owned is not None and owned.minter_pid is not None
            channel = await owned.open(namespace[1])
            assert await channel.read() == b"inside"
            channel.abort()
        finally:
            await pending.close()

    asyncio.run(main())


def test_only_a_network_namespace_passes_the_namespace_check(tmp_path: Path) -> None:
    (tmp_path / "net:[1]").write_text("")  # a file named like one is still a file
    opened = {
        "net": os.open("/proc/self/ns/net", os.O_RDONLY),
        "mnt": os.open("/proc/self/ns/mnt", os.O_RDONLY),
        "file": os.open(tmp_path / "net:[1]", os.O_RDONLY),
    }
    try:
        assert owned_upstream.not_a_network_namespace(opened["net"]) is None
        assert str(owned_upstream.not_a_network_namespace(opened["mnt"])).startswith("'mnt:[")
        # Named by its path (cut at 80 characters).
        assert owned_upstream.not_a_network_namespace(opened["file"]) == repr(
            str(tmp_path / "net:[1]")[:80]
        )
    finally:
        for fd in opened.values():
            os.close(fd)
    closed = os.open("/dev/null", os.O_RDONLY)
    os.close(closed)
    assert owned_upstream.not_a_network_namespace(closed) == (
        "an unreadable descriptor (No such file or directory)"
    )


def test_a_minter_that_dies_is_started_anew(namespace: tuple[int, int]) -> None:
    # A minter that exited or stopped answering left every later app connection of the
    # session a 502 until the session ended.
    host_end, entry_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    rights = namespace[0].to_bytes(4, "little")
    entry_end.sendmsg([b"n"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
    entry_end.close()

    async def main() -> None:
        pending = PendingOwnedUpstream(host_end)
        try:
            first = await pending.get()
            assert first is not None and first.minter_pid is not None
            os.kill(first.minter_pid, signal.SIGKILL)
            assert first._process is not None
            await first._process.wait()
            # The pool's sockets stay good (they are the namespace's): take them all,
            # and the next ask finds the minter gone.
            deadline = asyncio.get_running_loop().time() + 10
            while first.broken is None:
                assert asyncio.get_running_loop().time() < deadline, "the death went unseen"
                with contextlib.suppress(UpstreamError):
                    (await first.open(namespace[1])).abort()
            again = await pending.get()
            assert again is not None and again is not first
            assert again.minter_pid not in (None, first.minter_pid)
            channel = await again.open(namespace[1])
            assert await channel.read() == b"inside"
            channel.abort()
        finally:
            await pending.close()

    asyncio.run(main())
