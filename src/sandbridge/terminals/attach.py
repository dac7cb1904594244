"""The attach client: proves possession of the requester's key, then runs the terminal.

The local terminal goes into raw mode for the session and its exact termios settings
are restored on every way out: the shell exiting, revocation, expiry, idle, a lost
relay, SIGTERM/SIGHUP/SIGINT of the client, or an error. The shell's output is shown
less what would make the terminal act beyond its window
(:mod:`~sandbridge.terminals.escape_filter`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import select
import signal
import termios
import time
import tty
from dataclasses import dataclass
from typing import Any

import nacl.signing

from sandbridge.aio.tasks import first_done, running
from sandbridge.exceptions import ChannelError, FrameError, SandbridgeError
from sandbridge.places.socket_path import short_path
from sandbridge.terminals import approval, channel, fd_io
from sandbridge.terminals.channel import Message, MessageType
from sandbridge.terminals.control import (
    first_line,
    parse_answer,
    parse_request_id,
    said,
    socket_of,
)
from sandbridge.terminals.escape_filter import EscapeFilter
from sandbridge.terminals.framed_stream import FramedStream, json_body
from sandbridge.terminals.frames import FROM_HOST_TO_CLIENT, Kind
from sandbridge.terminals.settings import HEARTBEAT

# Without a single frame from the host for this long, the relay is considered lost.
LIVENESS_TIMEOUT = 3 * HEARTBEAT
# The attach handshake must be answered within this long (the worker's readiness
# budget plus margin).
HANDSHAKE_TIMEOUT = 30.0
# A handshake answer line.
MAX_LINE = 16 * 1024


@dataclass(frozen=True, slots=True)
class Ending:
    """How a terminal ended: ``reason`` (exit, revoked, expired, ...) and the exit status."""

    reason: str
    status: int


async def _read_json(reader: asyncio.StreamReader) -> dict[str, Any]:
    """The session's next handshake line, parsed; one line (SandbridgeError), never a
    traceback, when it hangs up or sends more than a line."""
    try:
        return parse_answer(await reader.readuntil(b"\n"))
    except asyncio.IncompleteReadError:
        raise SandbridgeError(
            "the session closed the connection during the attach handshake"
        ) from None
    except asyncio.LimitOverrunError:
        raise SandbridgeError(f"the session sent a handshake line over {MAX_LINE} bytes") from None


def terminal_size(fd: int) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return 24, 80
    return max(1, size.lines), max(1, size.columns)


async def attach(
    request_id: str, key: nacl.signing.SigningKey, stdin_fd: int = 0, stdout_fd: int = 1
) -> Ending:
    """Attach to approved request ``request_id`` (``HOST:SESSION:XXXXXXXX`` for a far
    session: the handshake and the ciphertext cross the link, the keys stay here);
    return how the terminal ended."""
    place, far_id = parse_request_id(request_id)
    with short_path(socket_of(place)) as path:
        reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_LINE)
    try:
        async with asyncio.timeout(HANDSHAKE_TIMEOUT):
            writer.write(first_line(place))
            writer.write(json.dumps({"op": "attach", "id": far_id}).encode() + b"\n")
            hello = await _read_json(reader)
            # The proof names the session it is for: only the one asked for is signed.
            if hello.get("session") != place.session:
                raise SandbridgeError(
                    f"{place} answered the attach for session "
                    f"{said(hello.get('session'), 80)!r}, not {place.session!r}; nothing signed"
                )
            public, secret = channel.keypair()
            transcript = approval.attach_transcript(
                str(hello["session"]),
                str(hello["instance"]),
                far_id,
                bytes.fromhex(str(hello["challenge"])),
                public,
            )
            rows, cols = terminal_size(stdout_fd)
            proof = {
                "public": public.hex(),
                "signature": key.sign(transcript).signature.hex(),
                "rows": rows,
                "cols": cols,
                "term": os.environ.get("TERM", "xterm-256color"),
            }
            writer.write(json.dumps(proof).encode() + b"\n")
            ready = await _read_json(reader)
        receive_key, send_key = channel.client_keys(
            public, secret, bytes.fromhex(str(ready["public"]))
        )
        receiver = channel.Receiver(
            receive_key, bytes.fromhex(str(ready["header"])), channel.TO_CLIENT
        )
        sender = channel.Sender(send_key)
        stream = FramedStream(reader, writer, FROM_HOST_TO_CLIENT)
        stream.send(Kind.CIPHER, sender.header)
        return await _run(stream, sender, receiver, stdin_fd, stdout_fd)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _run(  # noqa: PLR0915  (the attach client's conversation in protocol order)
    stream: FramedStream,
    sender: channel.Sender,
    receiver: channel.Receiver,
    stdin_fd: int,
    stdout_fd: int,
) -> Ending:
    loop = asyncio.get_running_loop()
    saved = termios.tcgetattr(stdin_fd) if os.isatty(stdin_fd) else None
    ending: list[Ending] = []
    done = asyncio.Event()
    # The shell's output reaches the owner's terminal window, nothing beyond it.
    escapes = EscapeFilter()

    def finish(reason: str, status: int) -> None:
        if not ending:
            ending.append(Ending(reason, status))
        done.set()

    def send(message: Message) -> None:
        if not sender.finished:
            stream.send(Kind.CIPHER, sender.seal(message))

    def on_signal(signum: int) -> None:
        send(Message(MessageType.CLOSE, final=True))
        finish("signal", 128 + signum)

    def on_resize() -> None:
        send(channel.resize_message(*terminal_size(stdout_fd)))

    def on_input() -> None:
        try:
            data = os.read(stdin_fd, channel.MAX_DATA)
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(stdin_fd)
            return
        send(Message(MessageType.DATA, data))

    async def output() -> None:
        while True:
            async with asyncio.timeout(LIVENESS_TIMEOUT):
                frame = await stream.next()
            if frame is None:
                finish("relay_lost", 255)
                return
            if frame.kind is Kind.STOP:
                finish(str(json_body(frame).get("reason", "stopped"))[:64], 255)
                return
            message = receiver.open(frame.body)
            if message.type is MessageType.DATA:
                shown = escapes.feed(message.payload)
                if shown:
                    await fd_io.write_all(stdout_fd, shown)
            elif message.type is MessageType.EXIT:
                status, reason = message.exit
                finish(reason, status)
                return

    async def heartbeat() -> None:
        while True:
            await asyncio.sleep(HEARTBEAT)
            send(Message(MessageType.HEARTBEAT))
            await stream.drain()

    signals = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    # The event loop may make the terminal non-blocking; the shell after us expects it not.
    blocking = [(fd, os.get_blocking(fd)) for fd in (stdin_fd, stdout_fd)]
    try:
        if saved is not None:
            tty.setraw(stdin_fd, termios.TCSANOW)
        for signum in signals:
            loop.add_signal_handler(signum, on_signal, signum)
        loop.add_signal_handler(signal.SIGWINCH, on_resize)
        loop.add_reader(stdin_fd, on_input)
        async with running(output(), done.wait(), heartbeat()) as (reading, waiting, _):
            await first_done(reading, waiting)
            if reading.done() and not reading.cancelled():
                error = reading.exception()
                if isinstance(error, TimeoutError):
                    finish("relay_lost", 255)
                elif isinstance(error, ChannelError | FrameError):
                    finish("protocol", 255)
                elif isinstance(error, OSError):
                    finish("relay_lost", 255)
        with contextlib.suppress(OSError):
            await stream.drain()
    finally:
        with contextlib.suppress(Exception):
            loop.remove_reader(stdin_fd)
        for signum in (*signals, signal.SIGWINCH):
            loop.remove_signal_handler(signum)
        for fd, was_blocking in blocking:
            with contextlib.suppress(OSError):
                os.set_blocking(fd, was_blocking)
        if closing := escapes.close():  # a passed string the output left open
            with contextlib.suppress(OSError):
                os.write(stdout_fd, closing)
        if saved is not None:
            restore_terminal(stdin_fd, saved, stdout_fd if os.isatty(stdout_fd) else None)
    return ending[0] if ending else Ending("relay_lost", 255)


# The query whose answer marks the end of the terminal's answers: primary device
# attributes (DA1), which every VT100-compatible terminal answers, in order with the
# answers to what was printed before it.
END_QUERY = b"\x1b[c"
_END_ANSWER = re.compile(rb"\x1b\[\?[0-9;]*c")
# How long to wait for that answer: a local terminal answers at once, one across an SSH
# hop within a round trip; a terminal that never answers costs this once, at the end.
END_ANSWER_WAIT = 2.0


def restore_terminal(fd: int, saved: list[Any], query_fd: int | None = None) -> None:
    """Put the local terminal back as it was, after what was written reached it, and
    discard its unread input, also the answers still on their way (``query_fd``: where
    to ask the terminal for its answers' end, None for a terminal not asked).

    Threat: input still unread when the terminal ends was meant for the sandbox, and the
    next reader of the terminal is the owner's host shell: keys typed on just as the
    sandbox ended the terminal (its worker can end it at any moment it chooses, seeing
    every key), or a terminal's answer to a query the sandbox printed last, ran on the
    host; a terminal across a slow hop answers after the end. Defence: the terminal is
    asked :data:`END_QUERY` and its input read and dropped until that answer (which
    comes after every earlier one) or :data:`END_ANSWER_WAIT`; then ``TCSAFLUSH`` drops
    the rest with the same call that restores the modes."""
    if query_fd is not None:
        with contextlib.suppress(OSError):
            os.write(query_fd, END_QUERY)
            _drop_input_until(fd, _END_ANSWER, END_ANSWER_WAIT)
    termios.tcsetattr(fd, termios.TCSAFLUSH, saved)


def _drop_input_until(fd: int, answer: re.Pattern[bytes], wait: float) -> None:
    """Read and drop ``fd``'s input until ``answer`` was in it, or for ``wait`` seconds."""
    deadline = time.monotonic() + wait
    seen = b""
    while answer.search(seen) is None:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return
        data = os.read(fd, 4096)
        if not data:
            return
        seen = seen[-64:] + data  # an answer cut across reads is still found


def describe(ending: Ending) -> str:
    """One line for the user about how the terminal ended. The reason is the worker's
    (inside the sandbox) or the host's (a far machine's): hostile text, shown as
    :func:`~sandbridge.terminals.control.said` shows it."""
    if ending.reason == "exit":
        return f"terminal ended: the shell exited with status {ending.status}"
    return f"terminal ended: {said(ending.reason, 64)}"
