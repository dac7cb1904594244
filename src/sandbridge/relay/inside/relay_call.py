"""One request on ``relay.sock`` without blocking: what ``--publish`` and auto-publish
send from the sandbox entry, on its :class:`~sandbridge.aio.poll_loop.PollLoop` (and on
the event loop, by the same code, once the loop has moved there).

It does what :func:`sandbridge.relay.inside.url_helper.ask_relay` does in a blocking socket
(connect, send the line, read the answer up to its newline, its end or
:data:`~sandbridge.protocol.sandbox_requests.MAX_ANSWER_BYTES`, decode it, all within
:data:`~sandbridge.protocol.sandbox_requests.ANSWER_TIMEOUT`) as a state machine
driven by readiness callbacks, and fails the same way with the same messages (the
``OSError`` of the failed call, ``TimeoutError("timed out")``, the ``ValueError`` of
an answer that is no JSON object). So a relay that never answers, answers garbage or
closes holds up nothing else the entry serves, nor the command's end.
"""

from __future__ import annotations

import enum
import errno
import socket
from collections.abc import Callable

from sandbridge.aio.poll_loop import PollLoop, Timer
from sandbridge.protocol.sandbox_requests import (
    ANSWER_TIMEOUT,
    MAX_ANSWER_BYTES,
    answer_complete,
    decode_answer,
)

# A relay.sock whose queue is full refuses a non-blocking connect (EAGAIN) where a
# blocking one would wait; it is tried again this often, within the answer timeout.
CONNECT_RETRY_DELAY = 0.05

# What the caller gets: the decoded answer, or why there is none.
Outcome = dict[str, object] | OSError | ValueError


class _State(enum.Enum):
    CONNECTING = "connecting"
    SENDING = "sending the request"
    READING = "reading the answer"
    DONE = "done"


class RelayCall:
    """Send ``request`` (one line) to ``socket_path`` and give :data:`Outcome` to
    ``done``, once, unless :meth:`close` comes first."""

    def __init__(
        self,
        loop: PollLoop,
        socket_path: str,
        request: bytes,
        done: Callable[[Outcome], object],
    ) -> None:
        self._loop = loop
        self._path = socket_path
        self._unsent = request
        self._done = done
        self._answer = b""
        self._state = _State.CONNECTING
        self._sock = socket.socket(
            socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC
        )
        self._fd = self._sock.fileno()
        self._deadline: Timer = loop.call_later(ANSWER_TIMEOUT, self._timed_out)
        # Connected from the loop, never in here: ``done`` is never called before the
        # caller holds this call.
        self._retry: Timer | None = loop.call_later(0, self._connect)

    def close(self) -> None:
        """Give up without calling ``done`` (the session is ending)."""
        if self._state is _State.DONE:
            return
        self._state = _State.DONE
        self._deadline.cancel()
        if self._retry is not None:
            self._retry.cancel()
        self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        self._sock.close()

    def _finish(self, outcome: Outcome) -> None:
        self.close()
        self._done(outcome)

    def _timed_out(self) -> None:
        self._finish(TimeoutError("timed out"))  # a blocking socket's words

    def _connect(self) -> None:
        self._retry = None
        try:
            self._sock.connect(self._path)
        except BlockingIOError as exc:
            if exc.errno != errno.EAGAIN:
                raise  # not said of a Unix socket; the loop reports it
            self._retry = self._loop.call_later(CONNECT_RETRY_DELAY, self._connect)
            return
        except OSError as exc:
            self._finish(exc)
            return
        self._state = _State.SENDING
        self._send()

    def _send(self) -> None:
        try:
            sent = self._sock.send(self._unsent)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self._finish(exc)
            return
        self._unsent = self._unsent[sent:]
        if self._unsent:
            self._loop.add_writer(self._fd, self._send)
            return
        self._loop.remove_writer(self._fd)
        self._state = _State.READING
        self._loop.add_reader(self._fd, self._read)

    def _read(self) -> None:
        try:
            data = self._sock.recv(MAX_ANSWER_BYTES)
        except BlockingIOError:
            return
        except OSError as exc:
            self._finish(exc)
            return
        self._answer += data
        if data and not answer_complete(self._answer):
            return
        try:
            outcome: Outcome = decode_answer(self._answer)
        except ValueError as exc:
            outcome = exc
        self._finish(outcome)
