"""``sandbridge run --publish PORT[:/base]``: register a sandbox port once its app listens.

Runs in the sandbox entry beside the command, on the entry's
:class:`~sandbridge.aio.poll_loop.PollLoop` (no event loop: the entry stays small; on
the event loop, by the same code, after a switch). It tries to connect to ``PORT`` on
loopback (``127.0.0.1``, then ``::1``: :mod:`sandbridge.protocol.app_address`, the
addresses the relay connects to) every :data:`POLL_INTERVAL` until something accepts
(the app is listening), then registers the port exactly like ``ags-webview-url PORT /base`` does
(:class:`~sandbridge.relay.inside.relay_call.RelayCall`); the host prints the URL.
"""

from __future__ import annotations

import errno
import os
import socket

from sandbridge.aio.poll_loop import PollLoop, Timer
from sandbridge.event_line import warn
from sandbridge.protocol.app_address import AppAttempts
from sandbridge.protocol.sandbox_requests import encode_register_request
from sandbridge.relay.inside.relay_call import Outcome, RelayCall

# How often to look for the app: fast enough to feel immediate, cheap while it builds.
POLL_INTERVAL = 0.1
# A dev server may take minutes to compile before it listens; after an hour, give up.
PUBLISH_DEADLINE = 3600.0


def parse_publish(value: str) -> tuple[int, str]:
    """Parse ``PORT`` or ``PORT:/base``; raise ValueError naming the value."""
    port_text, colon, base = value.partition(":")
    digits = len(port_text) <= 5 and port_text.isascii() and port_text.isdigit()
    if not digits or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"--publish {value!r}: port must be 1..65535")
    if colon and not base.startswith("/"):
        raise ValueError(f"--publish {value!r}: the base path must start with '/'")
    return int(port_text), base or "/"


class PortPublisher:
    """Waits (bounded by :data:`PUBLISH_DEADLINE`) until ``port`` listens, then registers
    it under ``base_path`` on ``socket_path`` (``relay.sock``), once."""

    def __init__(self, loop: PollLoop, port: int, base_path: str, socket_path: str) -> None:
        self._loop = loop
        self._port = port
        self._base_path = base_path
        self._socket_path = socket_path
        self._probe: socket.socket | None = None
        self._attempts = AppAttempts(port)
        self._next: Timer | None = None
        self._deadline: Timer | None = None
        self._call: RelayCall | None = None

    def start(self) -> None:
        """Look for the app now, and every :data:`POLL_INTERVAL` until it listens."""
        self._deadline = self._loop.call_later(PUBLISH_DEADLINE, self._give_up)
        self._look()

    def close(self) -> None:
        """Stop looking, or waiting for the answer (the session is ending)."""
        for timer in (self._next, self._deadline):
            if timer is not None:
                timer.cancel()
        self._next = self._deadline = None
        self._end_probe()
        if self._call is not None:
            self._call.close()
            self._call = None

    def _give_up(self) -> None:
        self.close()
        warn("publish.gave_up", port=self._port, after_seconds=PUBLISH_DEADLINE)

    def _look(self) -> None:
        """Look for the app on each of its loopback addresses in turn."""
        self._next = None
        self._attempts = AppAttempts(self._port)
        self._try()

    def _try(self) -> None:
        """Connect to the current address without blocking; :meth:`_probed` says how
        it went."""
        address = self._attempts.address
        try:
            probe = socket.socket(
                address.family, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC
            )
        except OSError as exc:  # no IPv6 in this kernel: the app is not on ::1
            self._result(exc.errno or errno.EAFNOSUPPORT)
            return
        self._probe = probe
        failed = probe.connect_ex((address.host, self._port))
        if failed == errno.EINPROGRESS:
            self._loop.add_writer(probe.fileno(), self._probed)
        else:
            self._result(failed)

    def _probed(self) -> None:
        assert self._probe is not None
        self._result(self._probe.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))

    def _result(self, failed: int) -> None:
        self._end_probe()
        if failed and self._attempts.failed(OSError(failed, os.strerror(failed))):
            self._try()  # refused here: the app may listen on the next address
            return
        if failed:  # nothing listens yet
            self._next = self._loop.call_later(POLL_INTERVAL, self._look)
            return
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        request = encode_register_request(self._port, self._base_path)
        self._call = RelayCall(self._loop, self._socket_path, request, self._answered)

    def _end_probe(self) -> None:
        if self._probe is not None:
            self._loop.remove_writer(self._probe.fileno())
            self._probe.close()
            self._probe = None

    def _answered(self, outcome: Outcome) -> None:
        self._call = None
        if isinstance(outcome, Exception):
            warn("publish.failed", port=self._port, reason=str(outcome))
        elif outcome.get("ok") is not True:
            warn("publish.refused", port=self._port, reason=str(outcome.get("error")))
