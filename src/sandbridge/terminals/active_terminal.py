"""A running terminal, host side: ciphertext both ways, the lease, and the cut-off.

The host holds no channel key: it copies ``CIPHER`` frames between the client and the
worker, forwards client input only within the worker's input window (``TAKEN``), and
every refresh asks the broker whether authority still stands, sending the worker its
next lease or a STOP. Every STOP arms a cut-off: a worker that has not ended within its
hang-up grace plus ``STOP_MARGIN`` (``settings.py``) has its link closed, whatever it
does meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sandbridge import log
from sandbridge.aio.tasks import first_done, running
from sandbridge.exceptions import FrameError
from sandbridge.terminals.admission import Lease, Refuse
from sandbridge.terminals.channel import END_REASONS
from sandbridge.terminals.framed_stream import FramedStream, json_body
from sandbridge.terminals.frames import INPUT_WINDOW, Kind
from sandbridge.terminals.settings import TerminalSettings

# A worker that takes no bytes from its link for this long is gone (or hostile): one
# maximal lease, since a worker that cannot take a lease for that long has lapsed anyway.
WORKER_DRAIN_TIMEOUT = 10.0
# The client gets this long to take the last bytes before its connection is closed.
FINAL_DRAIN_TIMEOUT = 5.0
# The exit status a worker reports is a shell's: a signal number or an exit code.
MAX_STATUS = 255


@dataclass
class ActiveTerminal:
    """The host's view of a running terminal: the worker link and why it ends."""

    worker: FramedStream
    # The worker's hang-up grace plus STOP_MARGIN: how long it may take to end after STOP.
    cutoff_after: float
    stop_reason: str | None = None
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    # Set when the worker had its time to end after STOP: the relay then closes its link.
    cut_off: asyncio.Event = field(default_factory=asyncio.Event)
    _cutoff_timer: asyncio.TimerHandle | None = field(default=None, init=False, repr=False)

    def stop(self, reason: str) -> None:
        """Tell the worker to end now (revoked, expired, client gone, session end), and arm
        the cut-off at once: nothing the worker does (not reading, flooding output) can
        keep the relay open past it."""
        if self.stop_reason is None:
            self.stop_reason = reason
            with contextlib.suppress(OSError, RuntimeError):
                self.worker.send_json(Kind.STOP, {"reason": reason})
            loop = asyncio.get_running_loop()
            self._cutoff_timer = loop.call_later(self.cutoff_after, self.cut_off.set)
        self.stopped.set()

    def disarm(self) -> None:
        """The relay is over: the cut-off timer has nothing left to cut."""
        if self._cutoff_timer is not None:
            self._cutoff_timer.cancel()

    async def drain(self) -> None:
        """Wait for the worker to take what was sent; a worker that stops reading its link
        is cut off at once (``worker_lost``)."""
        try:
            async with asyncio.timeout(WORKER_DRAIN_TIMEOUT):
                await self.worker.drain()
        except TimeoutError:
            self.stop("worker_lost")
            self.cut_off.set()
            raise


def send_lease(worker: FramedStream, lease: Lease) -> None:
    """Queue a LEASE frame (the worker ends when it runs out)."""
    worker.send_json(Kind.LEASE, {"seconds": lease.seconds, "final": lease.final})


async def relay(  # noqa: PLR0913, PLR0915  (both relay directions and the lease in one place, as the protocol runs)
    request_id: str,
    terminal: ActiveTerminal,
    client: FramedStream,
    counts: list[int],
    settings: TerminalSettings,
    renew: Callable[[], Lease | Refuse],
    client_gone: Callable[[], str] = lambda: "client",
) -> tuple[str, int]:
    """Ciphertext both ways plus the lease (``renew`` decides each one); count the bytes
    in ``counts`` (in, out) and return the end reason and exit status. ``client_gone``
    names the end when the client's connection ends (``client``; ``link`` for a client
    over the remote link whose link went, as the broker tells them apart)."""
    worker = terminal.worker
    ended: dict[str, Any] = {}
    window = [0]  # input bytes the worker has not yet said it took
    taken = asyncio.Event()
    tap = None if settings.relay_tap is None else open(settings.relay_tap, "ab")  # noqa: SIM115

    async def client_to_worker() -> None:
        try:
            while (frame := await client.next()) is not None:
                # Within the input window only: past it, the client is not read.
                while window[0] + len(frame.body) > INPUT_WINDOW:
                    taken.clear()
                    await taken.wait()
                window[0] += len(frame.body)
                counts[0] += len(frame.body)
                if tap is not None:
                    tap.write(frame.body)
                worker.send(Kind.CIPHER, frame.body)
                await terminal.drain()
        except TimeoutError:
            return
        except (FrameError, OSError):
            terminal.stop("protocol")
            return
        terminal.stop(client_gone())

    async def worker_to_client() -> None:
        while (frame := await worker.next()) is not None:
            if frame.kind is Kind.CIPHER:
                counts[1] += len(frame.body)
                if tap is not None:
                    tap.write(frame.body)
                client.send(Kind.CIPHER, frame.body)
                with contextlib.suppress(OSError):
                    await client.drain()
            elif frame.kind is Kind.TAKEN:
                size = json_body(frame).get("bytes")
                if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                    raise FrameError(f"TAKEN of {size!r} bytes")
                window[0] = max(0, window[0] - size)  # giving back more frees nothing more
                taken.set()
            elif frame.kind is Kind.ENDED:
                ended.update(json_body(frame))
                return

    async def lease() -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(settings.refresh):
                    await terminal.stopped.wait()
            if terminal.stop_reason is not None:
                break
            await asyncio.sleep(settings.refresh_delay)  # test knob: slow authority
            decision = renew()
            if isinstance(decision, Refuse):
                terminal.stop(decision.code)
                break
            send_lease(worker, decision)
            with contextlib.suppress(TimeoutError):
                await terminal.drain()

    try:
        async with running(
            worker_to_client(), terminal.cut_off.wait(), client_to_worker(), lease()
        ) as (upstream, cut_off, *_):
            try:
                # The terminal ends when the worker says so, or at the cut-off that every
                # STOP arms (a worker that ignored it, or stopped reading its link); the
                # client leaving only asks the worker to end.
                await first_done(upstream, cut_off)
                if upstream.done() and (error := upstream.exception()) is not None:
                    log.info("terminal.worker_refused", request=request_id, error=str(error))
                    terminal.stop("protocol")
            finally:
                terminal.disarm()
                if terminal.cut_off.is_set():  # what is still unsent, it would never read
                    worker.abort()
    finally:
        if tap is not None:
            tap.close()
    # ENDED comes from the sandbox: only known reasons and a plain int reach the audit.
    reason = ended.get("reason", terminal.stop_reason or "worker_lost")
    if not isinstance(reason, str) or reason not in END_REASONS | {"worker_lost"}:
        reason = "unknown"
    status = ended.get("status", -1)
    if (
        not isinstance(status, int)
        or isinstance(status, bool)
        or not -MAX_STATUS <= status <= MAX_STATUS
    ):
        status = -1
    with contextlib.suppress(OSError, RuntimeError, TimeoutError):
        # Always, ENDED or not: a client that read the worker's EXIT has left already; one
        # that did not (a worker that sent none) learns why here, and then closes.
        client.send_json(Kind.STOP, {"reason": reason})
        async with asyncio.timeout(FINAL_DRAIN_TIMEOUT):  # a client that stopped reading
            await client.drain()
    return str(reason), status
