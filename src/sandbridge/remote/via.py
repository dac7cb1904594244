"""``sandbridge connect --via CMD``: a command whose stdin and stdout reach the far
``sandbridge serve-stdio`` (``ssh HOST sandbridge serve-stdio``, ``kubectl exec -i POD --
sandbridge serve-stdio``, ``docker exec -i``, ``podman exec -i``) as a transport.

The command is split as a shell would split words (``shlex``) but run without a shell.
It runs in a process group of its own, so that closing the link ends it and whatever it
started (an ``ssh`` and its helpers) and leaves no process behind. Its stderr is the far
side's and the transport's diagnostics: each line goes to our stderr prefixed with the
machine's name, cut to :data:`MAX_STDERR_LINE` characters with control characters
replaced (a hostile far machine must not drive the owner's terminal with escapes), and
at most :data:`STDERR_LINES_PER_SECOND` lines a second are shown (the rest counted).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import sys
import time
from typing import TextIO

from sandbridge.aio.tasks import cancel_all
from sandbridge.exceptions import RemoteLinkError
from sandbridge.remote.transport import Link, OpenLink, widen_pipe
from sandbridge.terminals.control import said

# A stderr line from the far side shown to the owner is at most this long.
MAX_STDERR_LINE = 500
# Far stderr lines shown: a burst of this many, then this many per second. A far machine
# writing lines without end would otherwise flood the owner's terminal, and each line is
# a blocking write on connect's one event loop (a slow terminal or an unread pipe would
# stall every app of the machine). Lines over the budget are counted and said as one.
STDERR_BURST_LINES = 100
STDERR_LINES_PER_SECOND = 10.0
# The command's stdout read ahead at most twice this (asyncio's own subprocess default).
STDOUT_LIMIT = 64 * 1024
# How long the command gets to end after its stdin closed and SIGTERM, before SIGKILL.
END_GRACE_SECONDS = 2.0


def printable(line: bytes) -> str:
    """``line`` as one safe line of text: undecodable bytes and control characters
    (escape sequences included) become ``?``, and it is cut to MAX_STDERR_LINE."""
    text = line.decode(errors="replace").rstrip("\r\n")
    return said(text, MAX_STDERR_LINE) + ("..." if len(text) > MAX_STDERR_LINE else "")


class _LineBudget:
    """Shows far stderr lines within :data:`STDERR_BURST_LINES` and
    :data:`STDERR_LINES_PER_SECOND`; counts the rest and says how many were left out."""

    def __init__(self, name: str, out: TextIO) -> None:
        self._name = name
        self._out = out
        self._tokens = float(STDERR_BURST_LINES)
        self._since = time.monotonic()
        self.dropped = 0

    def show(self, line: bytes) -> None:
        now = time.monotonic()
        self._tokens = min(
            float(STDERR_BURST_LINES),
            self._tokens + (now - self._since) * STDERR_LINES_PER_SECOND,
        )
        self._since = now
        if self._tokens < 1:
            self.dropped += 1
            return
        self._tokens -= 1
        self.flush()
        print(f"{self._name}: {printable(line)}", file=self._out, flush=True)

    def flush(self) -> None:
        if self.dropped:
            print(
                f"{self._name}: ({self.dropped} more stderr lines not shown: over "
                f"{STDERR_LINES_PER_SECOND:g} a second)",
                file=self._out,
                flush=True,
            )
            self.dropped = 0


async def _relay_stderr(stream: asyncio.StreamReader, name: str, out: TextIO) -> None:
    budget = _LineBudget(name, out)
    pending = b""
    while chunk := await stream.read(64 * 1024):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            budget.show(line)
        if len(pending) > MAX_STDERR_LINE * 4:  # a line with no end: show it in pieces
            budget.show(pending)
            pending = b""
    if pending:
        budget.show(pending)
    budget.flush()


async def _pipe_streams(
    read_fd: int, write_fd: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, asyncio.BaseTransport]:
    """Streams over the pipe ends ``read_fd`` and ``write_fd`` (their transports own
    them), and the reading transport (for closing)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=STDOUT_LIMIT)
    reading = open(read_fd, "rb", buffering=0)  # noqa: SIM115  (the transport owns it)
    writing = open(write_fd, "wb", buffering=0)  # noqa: SIM115  (the transport owns it)
    try:
        read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), reading
        )
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, writing
        )
    except BaseException:
        reading.close()
        writing.close()
        raise
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop), read_transport


def via_transport(command: str, name: str, out: TextIO | None = None) -> OpenLink:
    """The transport that runs ``command`` for every link ``connect`` opens."""
    argv = shlex.split(command)
    if not argv:
        raise RemoteLinkError(f"--via {command!r}: give a command that runs serve-stdio")

    async def open_link() -> Link:
        # The command's stdin and stdout are pipes of ours, widened (transport.widen_pipe).
        stdin_ends, stdout_ends = os.pipe2(os.O_CLOEXEC), os.pipe2(os.O_CLOEXEC)
        for fd in (stdin_ends[0], stdout_ends[1]):
            widen_pipe(fd)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=stdin_ends[0],
                stdout=stdout_ends[1],
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            os.close(stdin_ends[1])
            os.close(stdout_ends[0])
            raise RemoteLinkError(f"--via {argv[0]!r}: {exc.strerror or exc}") from None
        finally:
            os.close(stdin_ends[0])
            os.close(stdout_ends[1])
        assert process.stderr is not None
        try:
            reader, writer, reader_transport = await _pipe_streams(stdout_ends[0], stdin_ends[1])
        except BaseException:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            raise
        stderr_task = asyncio.create_task(
            _relay_stderr(process.stderr, name, sys.stderr if out is None else out)
        )
        closed = False

        async def close() -> None:
            nonlocal closed
            if closed:
                return
            closed = True
            writer.close()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                async with asyncio.timeout(END_GRACE_SECONDS):
                    await process.wait()
            except TimeoutError:
                pass
            # Whatever the command started in its group goes too, even if it ended first.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            try:
                async with asyncio.timeout(END_GRACE_SECONDS):
                    await asyncio.shield(stderr_task)
            except TimeoutError:
                await cancel_all([stderr_task])
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            reader_transport.close()

        return Link(
            reader, writer, close, f"--via {command!r}", writer.transport.get_write_buffer_size
        )

    return open_link
