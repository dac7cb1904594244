"""The in-sandbox end of one terminal: one PTY, one shell, one encrypted channel.

The sandbox entry starts this process on the host's request (over the private channel
the host handed the entry at start) and gives it one end of a fresh socket pair whose
other end goes to the host. The worker:

- is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so every descendant of the shell,
  also ``setsid`` and double-forked ones, stays its descendant and can be killed at the
  end, while the agent's own processes (not its descendants) are never touched;
- starts the shell with a fixed, clean environment (no host or sandbox variables, no
  keys);
- speaks the end-to-end channel (:mod:`sandbridge.terminals.channel`) with the attach
  client; the host relays the ciphertext and sends cleartext leases;
- ends the terminal when its lease lapses, on the host's STOP, on the idle limit, when
  the client closes, or when the shell exits: SIGHUP to the foreground and the shell,
  SIGKILL to every remaining descendant after a grace period, final output drained to
  the client, then an authenticated EXIT.

The lease timer runs in the event loop, never in the PTY path: a blocked PTY cannot
keep a terminal open past its authority.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import fcntl
import os
import re
import signal
import socket
import struct
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

from sandbridge.aio.tasks import first_done, running
from sandbridge.exceptions import ChannelError, FrameError
from sandbridge.terminals import channel, fd_io
from sandbridge.terminals.channel import END_REASONS, Message, MessageType
from sandbridge.terminals.framed_stream import FramedStream, json_body
from sandbridge.terminals.frames import FROM_HOST_TO_WORKER, INPUT_WINDOW, Kind
from sandbridge.terminals.rate_limit import TokenBucket

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
# A lease is never longer than this, whatever the host says: authority must be
# re-confirmed at least this often (the bound).
MAX_LEASE = 10.0
# The host's START must arrive within the readiness budget.
START_TIMEOUT = 5.0
# Rate limits: a human types far below the input limit and a terminal shows far below
# the output limit; past them, reads pause (backpressure), nothing is dropped.
INPUT_BYTES_PER_SECOND = 256 * 1024
OUTPUT_BYTES_PER_SECOND = 4 * 1024 * 1024
# How often the watchdog looks at the lease, the idle clock and orphaned children.
TICK = 0.25
# After the shell is gone, final output is read for at most this long.
DRAIN_TIMEOUT = 2.0
# After SIGKILL, wait at most this long for every descendant to be gone.
KILL_TIMEOUT = 5.0
HEARTBEAT_INTERVAL = 5.0
# After ENDED, the host closes the link (it has read the end); one that does not is left
# after this long. Closing first instead, the worker could fail the host's STOP sent as the
# client left: its write's EPIPE closed the link with ENDED unread, and the audit then
# named the client's leaving, not the worker's end.
HOST_CLOSE_TIMEOUT = 10.0
TERM_PATTERN = re.compile(r"[A-Za-z0-9._+-]{1,64}")
SHELLS = ("/bin/bash", "/bin/sh")
# The only variables the shell sees; PS1 names the place so nobody mistakes it for the host.
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


async def within(bucket: TokenBucket, size: int) -> None:
    """Wait until ``bucket`` lets ``size`` bytes pass."""
    while (delay := bucket.delay(size, time.monotonic())) > 0:
        await asyncio.sleep(delay)


def clean_environment(term: str, home: str, shell: str) -> dict[str, str]:
    """The shell's whole environment: nothing from the host or the sandbox's own."""
    return {
        "PATH": PATH,
        "HOME": home,
        "SHELL": shell,
        "TERM": term if TERM_PATTERN.fullmatch(term) else "xterm-256color",
        "LANG": "C.UTF-8",
        "PS1": r"\u@sandbox:\w\$ ",
        "SANDBRIDGE_TERMINAL": "1",
    }


def set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class Worker:
    """One terminal, from START to the final EXIT."""

    def __init__(self, stream: FramedStream) -> None:
        self.stream = stream
        self.reason: str | None = None
        self.status = -1
        self.ended = asyncio.Event()
        self.shell_pid = -1
        self.master = -1
        self.lease_deadline = 0.0
        self.lease_final = False
        self.last_activity = time.monotonic()
        self.idle_limit = 300.0
        self.hangup_grace = 2.0
        self._sender: channel.Sender | None = None
        self._receiver: channel.Receiver | None = None
        self._receiver_key = b""
        self._input_limit = TokenBucket(INPUT_BYTES_PER_SECOND, time.monotonic())
        self._output_limit = TokenBucket(OUTPUT_BYTES_PER_SECOND, time.monotonic())
        # Input waits here for the PTY, so a shell that does not read cannot hold up the
        # leases and STOPs that arrive on the same link: the link is always read. The host
        # keeps at most INPUT_WINDOW bytes in flight (TAKEN frees them), which bounds this.
        self._input: asyncio.Queue[tuple[bytes, int]] = asyncio.Queue()
        self._held = 0  # CIPHER bytes received and not yet given back with TAKEN

    def end(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.ended.set()

    async def start(self) -> None:
        """Wait for START, open the PTY, start the shell, answer READY."""
        async with asyncio.timeout(START_TIMEOUT):
            frame = await self.stream.next()
        if frame is None or frame.kind is not Kind.START:
            raise FrameError("the first frame must be START")
        body = json_body(frame)
        client_public = bytes.fromhex(str(body["client_public"]))
        rows, cols = int(body["rows"]), int(body["cols"])
        channel.check_size(rows, cols)
        self.set_lease(float(body["lease"]), body.get("final") is True)
        self.idle_limit = float(body["idle"])
        self.hangup_grace = float(body["hangup_grace"])
        public, secret = channel.keypair()
        self._receiver_key, send_key = channel.worker_keys(public, secret, client_public)
        self._sender = channel.Sender(send_key)
        self.master, slave = os.openpty()
        set_size(slave, rows, cols)
        shell = next((s for s in SHELLS if os.access(s, os.X_OK)), "/bin/sh")
        home = os.environ.get("HOME", "/")
        env = clean_environment(str(body.get("term", "")), home, shell)
        argv = [shell, "--noprofile", "--norc", "-i"] if shell.endswith("bash") else [shell, "-i"]
        pid = os.fork()
        if pid == 0:  # the child: becomes the session leader of the PTY, then the shell
            try:
                os.close(self.master)
                os.login_tty(slave)
                # Ignored signals stay ignored across exec: the shell must get the defaults
                # (this worker ignores SIGHUP, Python ignores SIGPIPE and SIGXFSZ).
                for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ):
                    signal.signal(signum, signal.SIG_DFL)
                os.execve(shell, argv, env)
            finally:
                os._exit(127)
        os.close(slave)
        self.shell_pid = pid
        os.set_blocking(self.master, False)
        self.stream.send_json(
            Kind.READY, {"public": public.hex(), "header": self._sender.header.hex()}
        )
        await self.stream.drain()

    def set_lease(self, seconds: float, final: bool) -> None:
        """Authority holds for ``seconds`` more; ``final``: it ends then (the approval expires)."""
        self.lease_deadline = time.monotonic() + max(0.0, min(seconds, MAX_LEASE))
        self.lease_final = final

    def send(self, message: Message) -> None:
        assert self._sender is not None
        self.stream.send(Kind.CIPHER, self._sender.seal(message))

    async def pump_output(self) -> None:
        """PTY -> client, in frames of at most 16 KiB, within the output rate."""
        while True:
            await fd_io.readable(self.master)
            try:
                data = os.read(self.master, channel.MAX_DATA)
            except BlockingIOError:
                continue
            except OSError:  # EIO: every slave end is closed
                return
            if not data:
                return
            await within(self._output_limit, len(data))
            self.last_activity = time.monotonic()
            self.send(Message(MessageType.DATA, data))
            await self.stream.drain()

    async def pump_input(self) -> None:
        """Host -> worker: leases, STOP, and the client's encrypted messages."""
        while True:
            frame = await self.stream.next()
            if frame is None:
                self.end("client")
                return
            if frame.kind is Kind.LEASE:
                lease = json_body(frame)
                self.set_lease(float(lease["seconds"]), lease.get("final") is True)
            elif frame.kind is Kind.STOP:
                reason = str(json_body(frame).get("reason"))
                self.end(reason if reason in END_REASONS else "revoked")
                return
            elif frame.kind is Kind.CIPHER:
                size = len(frame.body)
                if self._held + size > INPUT_WINDOW:
                    raise FrameError(f"the host sent input past the {INPUT_WINDOW}-byte window")
                if self._receiver is None:  # the client's first message is its header
                    self._receiver = channel.Receiver(
                        self._receiver_key, frame.body, channel.TO_WORKER
                    )
                    self.taken(size)
                    continue
                message = self._receiver.open(frame.body)
                if message.type is MessageType.DATA:
                    self.last_activity = time.monotonic()
                    self._held += size
                    self._input.put_nowait((message.payload, size))  # bounded by the window
                    continue
                self.taken(size)
                if message.type is MessageType.RESIZE:
                    rows, cols = message.size
                    set_size(self.master, rows, cols)  # the kernel sends SIGWINCH
                elif message.type is MessageType.CLOSE:
                    self.end("client")
                    return
            else:
                raise FrameError(f"unexpected {frame.kind.name} frame")

    def taken(self, size: int) -> None:
        """Tell the host ``size`` bytes of its input window are free again."""
        self.stream.send_json(Kind.TAKEN, {"bytes": size})

    async def pump_pty_input(self) -> None:
        """Queued input -> PTY, within the input rate; each frame's window given back once
        the PTY took it."""
        while True:
            data, size = await self._input.get()
            await within(self._input_limit, len(data))
            await fd_io.write_all(self.master, data)
            self._held -= size
            self.taken(size)

    async def watchdog(self) -> None:
        """Lease, idle limit and heartbeats: timers, independent of the PTY."""
        next_heartbeat = time.monotonic() + HEARTBEAT_INTERVAL
        while True:
            now = time.monotonic()
            if now >= self.lease_deadline:
                self.end("expired" if self.lease_final else "lease")
                return
            if now - self.last_activity >= self.idle_limit:
                self.end("idle")
                return
            if now >= next_heartbeat:
                self.send(Message(MessageType.HEARTBEAT))
                next_heartbeat = now + HEARTBEAT_INTERVAL
            self._reap()
            await asyncio.sleep(TICK)

    async def wait_shell(self) -> None:
        fd = os.pidfd_open(self.shell_pid)
        try:
            await fd_io.readable(fd)  # a pidfd is readable once the process exits
        finally:
            os.close(fd)
        self._reap()
        self.end("exit")

    def _reap(self) -> None:
        """Collect exited children (orphans reparent here) and the shell's status."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.shell_pid:
                self.status = os.waitstatus_to_exitcode(status)

    async def run(self) -> None:
        output = asyncio.create_task(self.pump_output())
        async with running(
            self.ended.wait(),
            self.pump_input(),
            self.pump_pty_input(),
            self.watchdog(),
            self.wait_shell(),
        ) as (ended, *tasks):
            for task in await first_done(ended, *tasks):
                if task is not ended and not task.cancelled() and task.exception() is not None:
                    self.end("protocol")
        await self.finish(output)

    async def finish(self, output: asyncio.Task[None]) -> None:
        """Hang up, kill every descendant, drain the output, send the authenticated end."""
        await self.hang_up()
        self.kill_descendants()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DRAIN_TIMEOUT):
                await asyncio.shield(output)
        output.cancel()
        await asyncio.gather(output, return_exceptions=True)
        reason = self.reason or "exit"
        with contextlib.suppress(OSError, ChannelError, TimeoutError):
            self.send(channel.exit_message(self.status, reason))
            self.stream.send_json(Kind.ENDED, {"reason": reason, "status": self.status})
            async with asyncio.timeout(DRAIN_TIMEOUT):  # a host that stopped reading
                await self.stream.drain()

    async def hang_up(self) -> None:
        """SIGHUP to the foreground job first, and the time to finish (its last words still
        reach the terminal); then SIGHUP to the shell; each within the grace period."""
        foreground = -1
        with contextlib.suppress(OSError):
            foreground = os.tcgetpgrp(self.master)
        # 0 or our own group would signal this worker's group, not the terminal's; the
        # shell's own group is hung up next anyway.
        if foreground > 1 and foreground not in (os.getpgrp(), self.shell_pid):
            with contextlib.suppress(OSError):
                os.killpg(foreground, signal.SIGHUP)
                os.killpg(foreground, signal.SIGCONT)
            await self._wait(lambda: _group_alive(foreground))
        with contextlib.suppress(OSError):
            os.killpg(self.shell_pid, signal.SIGHUP)
            os.killpg(self.shell_pid, signal.SIGCONT)
        await self._wait(lambda: self.status == -1 and _alive(self.shell_pid))

    async def _wait(self, condition: Callable[[], bool]) -> None:
        """Wait while ``condition`` holds, at most the hang-up grace."""
        deadline = time.monotonic() + self.hangup_grace
        while time.monotonic() < deadline and condition():
            self._reap()
            await asyncio.sleep(TICK / 5)

    def kill_descendants(self) -> None:
        """SIGKILL everything below this worker until nothing is left."""
        deadline = time.monotonic() + KILL_TIMEOUT
        me = os.getpid()
        while (left := descendants(me)) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self._reap_blocking(left)
        self._reap()

    def _reap_blocking(self, pids: list[int]) -> None:
        for pid in pids:
            try:
                _, status = os.waitpid(pid, 0)
            except ChildProcessError:
                continue
            if pid == self.shell_pid:
                self.status = os.waitstatus_to_exitcode(status)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is still below this worker."""
    for pid in descendants(os.getpid()):
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pgid:
                return True
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def become_subreaper() -> None:
    """Reap the terminal's orphans, and be non-dumpable: the terminal's commands run as
    the same uid in the same namespaces, and could otherwise take this process's
    descriptors (the host's link) with pidfd_getfd(2), or its memory (the channel's keys)
    with ptrace(2). The shell's exec makes it dumpable again."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE)")


async def serve(sock: socket.socket) -> int:
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    stream = FramedStream(reader, writer, FROM_HOST_TO_WORKER)
    worker = Worker(stream)
    try:
        await worker.start()
    except (FrameError, ChannelError, TimeoutError, KeyError, ValueError, OSError) as exc:
        print(f"sandbridge pty worker: refused start: {exc}", file=sys.stderr)
        await stream.close()
        return 2
    await worker.run()
    await stream.until_peer_closes(HOST_CLOSE_TIMEOUT)
    await stream.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sandbridge-pty-worker")
    parser.add_argument("--fd", type=int, required=True, help="the host's socket")
    args = parser.parse_args(argv)
    become_subreaper()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # Never inherited by the shell: nothing in the terminal may write to the host's link.
    os.set_inheritable(args.fd, False)
    sock = socket.socket(fileno=args.fd)
    try:
        return asyncio.run(serve(sock))
    except (BrokenPipeError, ConnectionResetError):
        # The host went away: EPIPE when it closed first, ECONNRESET when it closed with
        # frames of ours unread (asyncio's own "Connection lost" while draining carries
        # no errno: told by its class). Either way there is no one left to tell; no
        # traceback into the terminal.
        return 0


if __name__ == "__main__":
    sys.exit(main())
