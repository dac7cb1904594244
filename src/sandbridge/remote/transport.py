"""What a transport gives ``sandbridge connect``: one byte stream to the far ``serve-stdio``.

The remote protocol (``protocol/remote_wire.py``) runs over any bidirectional byte
stream whose far end is ``sandbridge serve-stdio``: a subprocess's stdin and stdout
(``--via CMD``: ``ssh HOST sandbridge serve-stdio``, ``kubectl exec -i``, ``docker exec -i``)
or an SSH exec channel (``ssh_transport.py``). A transport is an :data:`OpenLink`: an
async function that opens one such stream and returns it as a :class:`Link`.
``connect`` calls it again for every reconnect, so it must not keep state that
a dropped link leaves stale.

The contract every transport keeps:

- ``reader.read(n)`` returns at most ``n`` bytes, and ``b""`` once the far side is
  gone for good (end of stream, the command exited, the channel closed);
- ``writer.write`` plus ``await writer.drain()`` carries backpressure (drain waits
  while the transport's buffer is full); writes after the link broke may raise
  ``ConnectionError`` or be dropped silently, the reader's ``b""`` is what counts;
- ``link.backlog()``, where the transport can tell, is how many written bytes its
  buffer still holds: the mux drains the link only when that is large, instead of
  after every write (without it, after every write);
- ``await link.close()`` ends the stream, ends whatever the transport started (the
  subprocess, the SSH connection) and waits until it is gone: nothing is left behind
  when it returns, and calling it twice is harmless;
- opening raises :class:`~sandbridge.exceptions.RemoteLinkError` with a one-line
  reason when the link cannot be opened.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

# The far command a link runs unless told otherwise: found on the far PATH, as `ssh HOST
# sandbridge serve-stdio` would find it. Here, not in ssh_transport.py, so that the
# command line can name it without importing asyncssh (a tenth of a second at every
# start of every command).
DEFAULT_REMOTE_COMMAND = "sandbridge serve-stdio"

# The pipes of a link (sshd's to serve-stdio, connect's to a --via command) hold 64 KiB:
# a bulk download filled one every 64 KiB, and each time both ends waited on the other.
# Linux's default limit for an unprivileged process (pipe-max-size) is this.
LINK_PIPE_BYTES = 1024 * 1024


def widen_pipe(fd: int) -> None:
    """Make the pipe at ``fd`` hold :data:`LINK_PIPE_BYTES`, if it is a pipe and the
    system allows (``/proc/sys/fs/pipe-max-size``); else leave it as it is."""
    with contextlib.suppress(OSError):
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, LINK_PIPE_BYTES)


class LinkReader(Protocol):
    """The reading half: ``asyncio.StreamReader`` and ``asyncssh.SSHReader`` both fit."""

    async def read(self, n: int = -1) -> bytes:
        """At most ``n`` bytes; ``b""`` at the end of the stream."""
        ...


class LinkWriter(Protocol):
    """The writing half: ``asyncio.StreamWriter`` and ``asyncssh.SSHWriter`` both fit."""

    def write(self, data: bytes) -> None:
        """Queue ``data``; :meth:`drain` waits until the queue is short again."""
        ...

    async def drain(self) -> None:
        """Wait while the transport's send buffer is full (backpressure)."""
        ...


@dataclass(slots=True)
class Link:
    """One open byte stream to a far ``serve-stdio``.

    ``close`` ends the stream and everything the transport started for it and waits
    for that; it is idempotent. ``description`` names the far end for messages
    (``"via kubectl exec -i pod-1 -- sandbridge serve-stdio"``, ``"ssh alice@box"``).
    ``backlog`` says how many bytes the writer's buffer holds, if it can tell.
    """

    reader: LinkReader
    writer: LinkWriter
    close: Callable[[], Awaitable[None]]
    description: str
    backlog: Callable[[], int] | None = None


# Opens one link to the far machine; raises RemoteLinkError when it cannot.
OpenLink = Callable[[], Awaitable[Link]]
