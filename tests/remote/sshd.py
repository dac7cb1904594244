"""A real OpenSSH server for the tests: Debian's ``sshd`` on a free loopback port.

Everything it uses is thrown away with the test's tmp dir: its host key, the user key it
accepts (``authorized_keys``), and the client side's ``config`` and ``known_hosts`` that
the transport is pointed at explicitly, so the real ``~/.ssh`` is never read or touched.
It logs in the user the tests run as (root in CI: ``PermitRootLogin prohibit-password``,
keys only). Readiness is sshd's own "Server listening" line, never a sleep.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from tests.conftest import Process, free_port

SSHD = shutil.which("sshd", path="/usr/sbin:/usr/bin:/sbin:/bin")
# sshd refuses to start as root without its privilege separation directory.
PRIVSEP_DIR = Path("/run/sshd")
# How many times a free port may be taken by someone else between our probe and sshd's bind.
PORT_ATTEMPTS = 5


def write_key(path: Path) -> asyncssh.SSHKey:
    """A new Ed25519 key pair at ``path`` and ``path.pub``, private half 0600."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(path))
    path.chmod(0o600)
    key.write_public_key(f"{path}.pub")
    return key


def known_hosts_line(port: int, key: asyncssh.SSHKey) -> str:
    """The known_hosts line OpenSSH writes for ``127.0.0.1`` on ``port``."""
    public = key.export_public_key().decode().strip()
    return f"[127.0.0.1]:{port} {public}\n"


@dataclass
class Sshd:
    """One running sshd and the throwaway client files that reach it."""

    root: Path
    port: int
    host_key: asyncssh.SSHKey
    user_key_path: Path
    process: Process
    user: str = field(default_factory=getpass.getuser)

    @property
    def config_path(self) -> Path:
        return self.root / "client_config"

    @property
    def known_hosts_path(self) -> Path:
        return self.root / "known_hosts"

    def trust_host_key(self) -> None:
        """Write the server's real host key into the client's known_hosts."""
        self.known_hosts_path.write_text(known_hosts_line(self.port, self.host_key))

    def write_client_config(self, alias: str = "far", *extra: str) -> None:
        """A client ``config`` naming this server ``alias``, with our key and known_hosts and
        no agent (the tests must not reach the owner's real one)."""
        lines = [
            f"Host {alias}",
            "  HostName 127.0.0.1",
            f"  Port {self.port}",
            f"  User {self.user}",
            f"  IdentityFile {self.user_key_path}",
            "  IdentitiesOnly yes",
            "  IdentityAgent none",
            f"  UserKnownHostsFile {self.known_hosts_path}",
            *(f"  {line}" for line in extra),
            "",
        ]
        with self.config_path.open("a") as config:
            config.write("\n".join(lines))

    def session_pids(self) -> list[int]:
        """The per-connection sshd processes (descendants of the listener named sshd)."""
        found = []
        for pid in _descendants(self.process.popen.pid):
            try:
                name = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            if name == "sshd":
                found.append(pid)
        return found

    def signal_sessions(self, sig: int) -> list[int]:
        """Send ``sig`` to every per-connection sshd process; returns their pids."""
        pids = self.session_pids()
        _signal(pids, sig)
        return pids

    def stop(self) -> None:
        """Stop the listener and every session it started (frozen ones too)."""
        sessions = _descendants(self.process.popen.pid)
        _signal(sessions, signal.SIGKILL)
        self.process.stop()


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, from /proc's children lists."""
    found: list[int] = []
    pending = [pid]
    while pending:
        parent = pending.pop()
        try:
            tasks = Path(f"/proc/{parent}/task").iterdir()
            children = [
                int(child) for task in tasks for child in (task / "children").read_text().split()
            ]
        except OSError:
            continue
        found += children
        pending += children
    return found


def _server_config(root: Path, port: int, host_key_path: Path) -> Path:
    config = root / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key_path}",
                "PidFile none",
                "UsePAM no",
                f"AuthorizedKeysFile {root / 'authorized_keys'}",
                # The tmp dir's owner and modes are the test's, not a home dir's.
                "StrictModes no",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                # ProxyJump through this same server is a direct-tcpip channel.
                "AllowTcpForwarding yes",
                "LogLevel VERBOSE",
                "",
            ]
        )
    )
    return config


def start_sshd(root: Path) -> Sshd:
    """Start sshd in ``root`` (fresh host and user keys) and return once it listens."""
    if SSHD is None:
        raise AssertionError("sshd is missing: install Debian's openssh-server (./dev.sh setup)")
    if os.getuid() == 0:
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    host_key = write_key(root / "host_key")
    user_key_path = root / "user_key"
    write_key(user_key_path)
    shutil.copyfile(f"{user_key_path}.pub", root / "authorized_keys")
    failures = []
    for _ in range(PORT_ATTEMPTS):
        port = free_port()
        config = _server_config(root, port, root / "host_key")
        process = Process([SSHD, "-D", "-e", "-f", str(config)])
        try:
            process.wait_line("Server listening on 127.0.0.1", stream="stderr")
        except AssertionError as error:
            process.stop(signal.SIGKILL)
            failures.append(str(error))
            continue
        return Sshd(root, port, host_key, user_key_path, process)
    raise AssertionError(f"sshd did not start: {failures}")


def sshd_in(root: Path) -> Iterator[Sshd]:
    """A fixture body: a started sshd, stopped (sessions and all) afterwards."""
    server = start_sshd(root)
    try:
        yield server
    finally:
        server.stop()


def start_agent(root: Path, *keys: Path) -> Process:
    """A real ``ssh-agent`` on ``root/agent.sock`` holding ``keys``; stop it when done."""
    socket_path = root / "agent.sock"
    agent = Process(["ssh-agent", "-D", "-a", str(socket_path)])
    agent.wait_line("SSH_AUTH_SOCK=")
    env = {**os.environ, "SSH_AUTH_SOCK": str(socket_path)}
    for key in keys:
        subprocess.run(["ssh-add", "-q", str(key)], env=env, check=True, capture_output=True)
    return agent
