"""The SSH transport: one SSH connection, one exec channel running the far ``serve-stdio``.

``sandbridge connect [USER@]HOST[:PORT]`` reaches the far machine the way the owner's own
``ssh`` would, through asyncssh rather than protocol code of our own: the owner's
``~/.ssh/config`` (``HostName``, ``Port``, ``User``, ``IdentityFile``, ``IdentityAgent``,
``ProxyJump``, ``ServerAlive*``), their keys and ssh-agent, and host keys checked against
their known_hosts files. Two settings of that config are overruled, because the far
machine is less trusted than the laptop and the link carries bytes: the agent is never
forwarded (``ForwardAgent``) and the channel never has a PTY (``RequestTTY``). The far
machine needs its sshd and ``sandbridge`` on the PATH: no new port, no service of ours
listening there.

Host keys are never accepted silently. A host whose key is not in known_hosts, or whose
key differs from the one listed, is a :class:`~sandbridge.exceptions.RemoteLinkRefused`
that names the host and the key's fingerprint; there is no "accept new" and
``StrictHostKeyChecking no`` is not honoured (``ssh HOST true`` once, in a terminal, is
how a key is learnt). ``UserKnownHostsFile none`` means no key is trusted, not that none
is checked.

A dead link (a frozen far machine, a dropped network) is noticed by SSH keepalives:
unanswered for ``interval * count_max`` seconds, the connection is closed, the reader
returns ``b""`` and :meth:`SshLink.wait` raises. Every error is one line that names the
host (docs/remote.md, "Over SSH").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import asyncssh

from sandbridge import log
from sandbridge.exceptions import AuthorityError, RemoteLinkError, RemoteLinkRefused
from sandbridge.protocol.authority import split_host_port
from sandbridge.remote.transport import DEFAULT_REMOTE_COMMAND, Link, OpenLink
from sandbridge.terminals.control import said

# Keepalives when the owner's config sets no ServerAliveInterval: a request every 15 s,
# the link declared dead after 3 unanswered, so a dead link is noticed within 45 s (well
# inside a terminal's lease, and long enough for a slow mobile link).
DEFAULT_KEEPALIVE_INTERVAL = 15.0
DEFAULT_KEEPALIVE_COUNT_MAX = 3
# How long connecting (TCP, key exchange, authentication, per hop) and then the far
# command's first byte may take: a machine that does not answer in this long is down.
DEFAULT_CONNECT_TIMEOUT = 30.0
# Ciphers when the owner's config names none: OpenSSH's default set, AES-GCM first. asyncssh
# does AES-GCM in one call into OpenSSL (AES instructions), ChaCha20-Poly1305 in two; a
# 200 MiB read was 1.1-1.4x faster with it (docs/remote.md, "Over SSH").
PREFERRED_CIPHERS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes256-ctr",
    "aes192-ctr",
    "aes128-ctr",
)
# OpenSSH's known_hosts files when the config names none.
OPENSSH_USER_KNOWN_HOSTS = ["~/.ssh/known_hosts", "~/.ssh/known_hosts2"]
OPENSSH_GLOBAL_KNOWN_HOSTS = ["/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"]
# ProxyJump hops followed at most: more is a loop in the config, not a network.
MAX_JUMPS = 8
# The far command's stderr kept for an error message: its last lines, not a log.
STDERR_TAIL_BYTES = 2048
# The most the first read (the far command's first bytes) takes; the rest stays queued.
FIRST_READ_BYTES = 64 * 1024
# The most of a far-chosen text (a disconnect reason, a stderr line) put in a message.
MAX_SAID_CHARS = 300
# The exit status POSIX shells give a command they cannot find.
EXIT_NOT_FOUND = 127
# What a destination's user and host may be: an SSH config alias, a DNS name, an IPv4
# address (an IPv6 one goes in brackets); nothing that a shell or ssh could read as an
# option or a second argument.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,252}")
_V6 = re.compile(r"\[[0-9A-Fa-f:.]{2,45}\]")


@dataclass(frozen=True, slots=True)
class Destination:
    """``[USER@]HOST[:PORT]``: what the owner typed; unset parts come from the config."""

    host: str
    user: str | None = None
    port: int | None = None

    def __str__(self) -> str:
        text = f"{self.user}@{self.host}" if self.user else self.host
        return f"{text}:{self.port}" if self.port else text


def parse_destination(text: str) -> Destination:
    """``[USER@]HOST[:PORT]``, or :class:`RemoteLinkRefused` naming what is wrong."""
    user, at, rest = text.rpartition("@")
    try:
        host, port = split_host_port(rest)
    except AuthorityError as error:
        raise RemoteLinkRefused(f"not [USER@]HOST[:PORT]: {text[:100]!r}: {error}") from None
    if at and not _NAME.fullmatch(user):
        raise RemoteLinkRefused(f"not a user name in {text[:100]!r}: {user[:40]!r}")
    if not (_NAME.fullmatch(host) or _V6.fullmatch(host)):
        raise RemoteLinkRefused(f"not a host name in {text[:100]!r}: {host[:100]!r}")
    return Destination(host.strip("[]"), user if at else None, port)


@dataclass(frozen=True, slots=True)
class SshSettings:
    """Where the owner's SSH set-up is read from, and the link's own limits.

    ``None`` means "as ``ssh`` would": ``~/.ssh/config`` if it exists; the known_hosts
    files the config names (``UserKnownHostsFile``, ``GlobalKnownHostsFile``), else
    ``~/.ssh/known_hosts`` and ``/etc/ssh/ssh_known_hosts``; keepalives from
    ``ServerAliveInterval``/``ServerAliveCountMax``, else the defaults above. Tests pass
    their own paths and never read the real ``~/.ssh``.
    """

    config_paths: tuple[Path, ...] | None = None
    known_hosts: tuple[Path, ...] | None = None
    remote_command: str = DEFAULT_REMOTE_COMMAND
    keepalive_interval: float | None = None
    keepalive_count_max: int | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT


def _said(text: str) -> str:
    """Text the far machine chose (a disconnect reason, its stderr) as one safe line for
    the owner's terminal (:func:`~sandbridge.terminals.control.said`)."""
    return said(text, MAX_SAID_CHARS)


class _Client(asyncssh.SSHClient):
    """Remembers the host key a server showed when it was not trusted, and why the
    connection ended, for the one-line messages."""

    def __init__(self) -> None:
        self.untrusted: tuple[str, str, int, asyncssh.SSHKey] | None = None
        self.lost: Exception | None = None

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        # Only reached for a key that known_hosts does not list: refuse, and remember it.
        self.untrusted = (host, addr, port, key)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc


class _Reader:
    """The exec channel's stdout as the transport contract's reader: ``b""`` at the end,
    however it came (the far command exited, the connection broke or was closed)."""

    def __init__(self, stream: asyncssh.SSHReader[bytes], first: bytes, name: str) -> None:
        self._stream = stream
        self._first = first
        self._name = name

    async def read(self, n: int = -1) -> bytes:
        if self._first:
            data, self._first = self._first, b""
            if 0 < n < len(data):
                data, self._first = data[:n], data[n:]
            return data
        try:
            return await self._stream.read(n)
        except (asyncssh.Error, OSError) as error:
            # The contract's end is b"", whatever the cause; the cause is logged here.
            log.info("remote.ssh_link_broke", destination=self._name, reason=_said(str(error)))
            return b""


class _Writer:
    """The exec channel's stdin as the contract's writer; a broken link is a
    ``ConnectionResetError`` (what the contract's callers catch), not asyncssh's own."""

    def __init__(self, stream: asyncssh.SSHWriter[bytes]) -> None:
        self._stream = stream

    def write(self, data: bytes) -> None:
        try:
            self._stream.write(data)
        except (asyncssh.Error, OSError) as error:
            raise ConnectionResetError(str(error)) from None

    async def drain(self) -> None:
        try:
            await self._stream.drain()
        except (asyncssh.Error, OSError) as error:
            raise ConnectionResetError(str(error)) from None


class SshLink:
    """One open SSH link: the connections (jump hosts first), the far process, and the
    task that keeps the tail of its stderr. :meth:`close` ends all of it."""

    def __init__(
        self,
        destination: Destination,
        connections: list[asyncssh.SSHClientConnection],
        client: _Client,
        process: asyncssh.SSHClientProcess[bytes],
        first: bytes,
    ) -> None:
        self.destination = destination
        self._connections = connections
        self._client = client
        self._process = process
        self._stderr: deque[bytes] = deque()
        self._stderr_task = asyncio.create_task(self._keep_stderr())
        self.reader = _Reader(process.stdout, first, str(destination))
        self.writer = _Writer(process.stdin)
        self.description = f"ssh {destination}"

    @property
    def cipher(self) -> str:
        """The cipher the link to the far machine negotiated (for diagnostics)."""
        return str(self._connections[-1].get_extra_info("send_cipher"))

    async def _keep_stderr(self) -> None:
        """Read the far stderr as it comes (a full channel window would stall the far
        command) and keep only its tail."""
        kept = 0
        with contextlib.suppress(asyncssh.Error, OSError):
            while data := await self._process.stderr.read(STDERR_TAIL_BYTES):
                self._stderr.append(data)
                kept += len(data)
                while kept - len(self._stderr[0]) >= STDERR_TAIL_BYTES:
                    kept -= len(self._stderr.popleft())

    def stderr_tail(self) -> str:
        """The far command's last stderr line, printable, for messages."""
        text = b"".join(self._stderr).decode("utf-8", "replace")
        lines = [line for line in text.splitlines() if line.strip()]
        return _said(lines[-1]) if lines else ""

    async def wait(self) -> int:
        """Wait until the far command ends; its exit status, or :class:`RemoteLinkError`
        when the link broke first (a keepalive timeout, a dropped connection)."""
        await self._process.wait_closed()
        return self._ending()

    def _ending(self) -> int:
        status = self._process.exit_status
        if status is None or status < 0:
            lost = self._client.lost
            why = _said(str(lost)) if lost else "the channel closed without an exit status"
            raise RemoteLinkError(f"the SSH link to {self.destination} broke: {why}")
        if status == EXIT_NOT_FOUND:
            raise RemoteLinkRefused(
                f"sandbridge is not installed on {self.destination.host} or not on its PATH "
                f"(the far command {self._process.command!r} was not found)"
            )
        return status

    async def close(self) -> None:
        """End the far command and every connection, and wait until they are gone."""
        self._process.close()
        for connection in reversed(self._connections):
            connection.close()
        for connection in reversed(self._connections):
            await connection.wait_closed()
        self._stderr_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._stderr_task

    def as_link(self) -> Link:
        channel = self._process.stdin.channel
        return Link(
            self.reader, self.writer, self.close, self.description, channel.get_write_buffer_size
        )


async def open_ssh_link(destination: Destination, settings: SshSettings) -> SshLink:
    """Connect to ``destination`` (through its ProxyJump hops) and start the far command;
    return once that command has said its first bytes (``serve-stdio`` speaks first).

    Raises :class:`RemoteLinkRefused` for what retrying will not change (host key,
    authentication, the far command missing) and :class:`RemoteLinkError` for the rest
    (unreachable, timed out)."""
    config = _config_paths(settings)
    connections: list[asyncssh.SSHClientConnection] = []
    try:
        client: _Client | None = None
        for hop in [*_jump_hosts(destination, config), destination]:
            tunnel = connections[-1] if connections else None
            connection, client = await _connect(hop, config, settings, tunnel)
            connections.append(connection)
        assert client is not None
        return await _start(destination, connections, client, settings)
    except BaseException:
        for connection in reversed(connections):
            connection.abort()
        for connection in reversed(connections):
            await connection.wait_closed()
        raise


def ssh_opener(destination: str, settings: SshSettings | None = None) -> OpenLink:
    """An :data:`OpenLink` for ``sandbridge connect``: each call opens a fresh link.
    The destination is checked now, so a typo fails before the first attempt."""
    parsed = parse_destination(destination)
    chosen = settings or SshSettings()

    async def open_link() -> Link:
        return (await open_ssh_link(parsed, chosen)).as_link()

    return open_link


async def _start(
    destination: Destination,
    connections: list[asyncssh.SSHClientConnection],
    client: _Client,
    settings: SshSettings,
) -> SshLink:
    try:
        # Bytes, and no PTY whatever the config's RequestTTY says: a PTY would rewrite them.
        process = await connections[-1].create_process(
            settings.remote_command, encoding=None, request_pty=False, x11_forwarding=False
        )
    except asyncssh.ChannelOpenError as error:
        raise RemoteLinkError(
            f"{destination.host} refused to run {settings.remote_command!r}: {_said(error.reason)}"
        ) from None
    link: SshLink | None = None
    try:
        async with asyncio.timeout(settings.connect_timeout):
            first = await process.stdout.read(FIRST_READ_BYTES)
        link = SshLink(destination, connections, client, process, first)
        if not first:
            await link.wait()
            raise RemoteLinkError(
                f"{settings.remote_command!r} on {destination.host} ended before saying "
                f"anything: {link.stderr_tail() or 'no message'}"
            )
        return link
    except TimeoutError:
        raise RemoteLinkError(
            f"{settings.remote_command!r} on {destination.host} said nothing within "
            f"{settings.connect_timeout:g} s"
        ) from None
    except BaseException:
        if link is not None:
            await link.close()
        else:
            process.close()
        raise


async def _connect(
    hop: Destination,
    config: list[str],
    settings: SshSettings,
    tunnel: asyncssh.SSHClientConnection | None,
) -> tuple[asyncssh.SSHClientConnection, _Client]:
    """One SSH connection, with our host-key check and the one-line errors."""
    clients: list[_Client] = []

    def client_factory() -> _Client:
        clients.append(_Client())
        return clients[-1]

    options = _options(hop, config)
    known_hosts = _known_hosts(settings, options)
    # The name the owner typed, and where the config sends it when that differs.
    real = f"{options.host}:{options.port}" if options.port != 22 else options.host
    where = hop.host if real == hop.host else f"{hop.host} ({real})"
    interval = settings.keepalive_interval or options.config.get("ServerAliveInterval")
    count_max = settings.keepalive_count_max or options.config.get("ServerAliveCountMax")
    extra: dict[str, Any] = {"username": hop.user} if hop.user else {}
    try:
        async with asyncio.timeout(settings.connect_timeout):
            connection = await asyncssh.connect(
                hop.host,
                hop.port or (),
                config=config,
                tunnel=tunnel,
                known_hosts=known_hosts,
                client_factory=client_factory,
                keepalive_interval=interval or DEFAULT_KEEPALIVE_INTERVAL,
                keepalive_count_max=count_max or DEFAULT_KEEPALIVE_COUNT_MAX,
                connect_timeout=settings.connect_timeout,
                encryption_algs=() if options.config.get("Ciphers") else PREFERRED_CIPHERS,
                # The far machine is not trusted with the owner's agent, whatever the
                # config's ForwardAgent says: serve-stdio never needs it.
                agent_forwarding=False,
                **extra,
            )
    except asyncssh.HostKeyNotVerifiable:
        raise _host_key_refusal(hop, clients, known_hosts) from None
    except asyncssh.PermissionDenied:
        raise RemoteLinkRefused(
            f"SSH authentication to {options.username}@{where} failed: the server accepted "
            "none of the keys offered (IdentityFile, ssh-agent); try `ssh -v` to the same host"
        ) from None
    except TimeoutError:
        raise RemoteLinkError(
            f"{where} is unreachable: no SSH answer within {settings.connect_timeout:g} s"
        ) from None
    except OSError as error:
        # asyncio words a refused connect as "Connect call failed (addr)"; errno says why.
        code = None if isinstance(error, socket.gaierror) else error.errno
        reason = os.strerror(code) if code and code > 0 else str(error.strerror or error)
        raise RemoteLinkError(f"{where} is unreachable over SSH: {reason}") from None
    except asyncssh.Error as error:
        raise RemoteLinkError(f"SSH to {where} failed: {_said(error.reason)}") from None
    except (ValueError, asyncssh.KeyImportError) as error:
        raise RemoteLinkRefused(f"SSH set-up for {where} is unusable: {error}") from None
    return connection, clients[-1]


def _host_key_refusal(
    hop: Destination, clients: list[_Client], known_hosts: asyncssh.SSHKnownHosts
) -> RemoteLinkRefused:
    shown = clients[-1].untrusted if clients else None
    if shown is None:  # a revoked key or an untrusted CA: asyncssh said so, not us
        return RemoteLinkRefused(f"the host key of {hop.host} is not trusted: refusing")
    host, addr, port, key = shown
    name = f"[{host}]:{port}" if port and port != 22 else host
    fingerprint = f"{key.get_algorithm()} {key.get_fingerprint('sha256')}"
    listed = known_hosts.match(host, addr, port if port != 22 else None)[0]
    if listed:
        return RemoteLinkRefused(
            f"the host key of {name} CHANGED: it shows {fingerprint}, known_hosts lists "
            "another; refusing (someone may be in the middle: ask the machine's admin, then "
            "fix known_hosts)"
        )
    return RemoteLinkRefused(
        f"the host key of {name} is unknown ({fingerprint}, not in known_hosts): refusing; "
        f"if that fingerprint is right, learn it with `ssh {hop}` once"
    )


def _options(hop: Destination, config: list[str]) -> asyncssh.SSHClientConnectionOptions:
    """The owner's config as it applies to ``hop`` (HostName, ProxyJump, ...)."""
    try:
        return asyncssh.SSHClientConnectionOptions(
            config=config, host=hop.host, port=hop.port or (), username=hop.user or ()
        )
    except (OSError, ValueError, asyncssh.Error) as error:
        raise RemoteLinkRefused(f"SSH set-up for {hop.host} is unusable: {error}") from None


def _jump_hosts(destination: Destination, config: list[str]) -> list[Destination]:
    """The ProxyJump hops before ``destination``, first to last, as OpenSSH chains them:
    the destination's ``ProxyJump a,b`` goes through a then b, and a's own ProxyJump
    (only the first hop's) comes before a."""
    hops: list[Destination] = []
    current = destination
    while True:
        jump = _options(current, config).tunnel
        if not isinstance(jump, str) or not jump:
            return hops
        chain = [parse_destination(part.strip()) for part in jump.split(",")]
        hops = chain + hops
        if len(hops) > MAX_JUMPS:
            raise RemoteLinkRefused(
                f"ProxyJump for {destination.host} goes through more than {MAX_JUMPS} hosts "
                f"(a loop in the SSH config?): {', '.join(str(h) for h in hops[:MAX_JUMPS])}"
            )
        current = chain[0]


def _config_paths(settings: SshSettings) -> list[str]:
    if settings.config_paths is not None:
        return [str(path) for path in settings.config_paths]
    default = Path("~/.ssh/config").expanduser()
    return [str(default)] if os.access(default, os.R_OK) else []


def _known_hosts(
    settings: SshSettings, options: asyncssh.SSHClientConnectionOptions
) -> asyncssh.SSHKnownHosts:
    """Every known_hosts entry the owner's ssh would trust for this hop, as one list.
    Always a list, never asyncssh's ``None`` (which would check nothing): no files means
    no trust."""
    if settings.known_hosts is not None:
        paths: Sequence[str] = [str(path) for path in settings.known_hosts]
    else:
        read = options.config
        user = cast("list[str]", read.get("UserKnownHostsFile", OPENSSH_USER_KNOWN_HOSTS))
        system = cast("list[str]", read.get("GlobalKnownHostsFile", OPENSSH_GLOBAL_KNOWN_HOSTS))
        paths = [os.path.expanduser(path) for path in [*(user or []), *(system or [])]]
    readable = [path for path in paths if os.access(path, os.R_OK)]
    alias = options.config.get("HostKeyAlias")
    known = _PortExactKnownHosts(alias if isinstance(alias, str) else None)
    try:
        for path in readable:
            with open(path, encoding="utf-8", errors="replace") as file:
                known.load(file.read())
    except (OSError, ValueError) as error:
        raise RemoteLinkRefused(f"cannot read known_hosts: {error}") from None
    return known


class _PortExactKnownHosts(asyncssh.SSHKnownHosts):
    """known_hosts looked up as OpenSSH does: on a port other than 22, only as
    ``[host]:port``. asyncssh's own lookup tries the bare host again when nothing names
    that form, and so trusted a key for the port a ``@revoked [host]:port`` line revokes
    (the revocation was dropped with the first lookup), and the port a ``![host]:port``
    pattern excludes, whenever a line for the bare host (or ``*``) lists it. A
    ``HostKeyAlias`` is looked up as it is, without the port, as OpenSSH does.

    And only the name is looked up, never the address it resolved to, as OpenSSH does
    (``CheckHostIP`` is off by default, and on it only warns): asyncssh took a line for
    either, so whoever could make the name resolve to a machine of theirs that known_hosts
    lists by address (a compromised teammate's box once reached by IP, an mDNS answer on
    the LAN) was taken for the far machine."""

    def __init__(self, alias: str | None) -> None:
        super().__init__()
        self._alias = alias

    def match(self, host: str, addr: str, port: int | None) -> Any:
        if self._alias is not None and host == self._alias:
            return self._match(host, "", None)
        return self._match(host, "", port)
