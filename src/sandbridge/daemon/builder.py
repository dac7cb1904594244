"""The daemon's run builder: the process that builds thin clients' runs (docs/daemon.md).

A thin ``sandbridge run`` (``cli/thin_run.py``) loads the standard library alone and has
the daemon build its session. The daemon's event loop does none of that work (git, the
policy's files, the mounts): it checks the client as it checks every client (its uid, its
mount namespace) and that it is of the daemon's own install (the same Python and the
same package: the builder runs the daemon's code, which must be the client's), then
hands the client's connection and standard descriptors to the builder, a process of its
own started with the daemon (``cli/run_builder.py``, named by the command line that
starts the daemon), which forks a child for each client. Anything else is answered
``fallback``, and the client runs the full command.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import socket
import subprocess
import sys

import sandbridge
from sandbridge import log
from sandbridge.protocol import daemon_wire

# How long the builder has to end when the daemon stops (it only waits for clients).
STOP_TIMEOUT = 5.0


def this_install() -> tuple[str, str]:
    """The Python (its environment's prefix and its real file) and the package
    directory a thin client must share with the daemon."""
    return daemon_wire.python_identity(sys.executable, sys.prefix), package_identity()


def package_identity() -> str:
    return daemon_wire.package_identity(sandbridge.__file__, sandbridge.__version__)


class RunBuilder:
    """The builder process, started by :meth:`start` with ``argv`` and the descriptor
    number of its end of the channel appended."""

    def __init__(self, argv: list[str]) -> None:
        self._argv = argv
        self._channel: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self._process = subprocess.Popen(
                [*self._argv, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # the daemon's terminal and its Ctrl-C are not its
            )
        ours.setblocking(False)
        self._channel = ours

    def forward(self, message: bytes, conn: socket.socket, fds: list[int]) -> str | None:
        """Hand ``message`` (``daemon_wire.builder_message``), the client's connection
        and its ``fds`` to the builder; why not, if it cannot take them."""
        if self._channel is None:
            return "the daemon has no run builder"
        rights = [conn.fileno(), *fds]
        try:
            rights_message = (socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", rights))
            self._channel.sendmsg([message], [rights_message])
        except OSError as exc:  # gone, or too far behind
            log.warning("daemon.builder_unavailable", error=exc.strerror)
            return f"the daemon's run builder cannot take it ({exc.strerror})"
        return None

    async def close(self) -> None:
        """Stop the builder (the clients' builders it forked carry on to their ends)."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                self._process.terminate()
            try:
                await asyncio.to_thread(self._process.wait, STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._process.kill()
                await asyncio.to_thread(self._process.wait)
