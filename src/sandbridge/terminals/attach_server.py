"""The broker's side of an ``attach``: the admission, the approval's reservation, and the
running terminal (docs/terminals.md).

An attach is decided by :func:`~sandbridge.terminals.admission.decide_admission` (pure:
the request is approved and unused, the attach proof was made with the approved
requester's private key, the owner's approval verifies now, the requester is still
allowed, the approval's remaining life covers the readiness budget); this module carries
the decision out: it audits a refusal, or reserves the approval's nonce in the fsynced
journal and only then starts the worker. The client is acknowledged after the worker
says it is ready. While the terminal runs
(:mod:`~sandbridge.terminals.active_terminal`), the broker relays ciphertext between the
client and the worker, and every ``refresh`` seconds re-checks authority.

The broker (``broker.py``) imports this module at a session's first ``attach``: a session
nobody attaches to never loads admission's and the running terminal's modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

from sandbridge import log
from sandbridge.aio import untrusted_fds
from sandbridge.exceptions import ControlRefusal, FrameError, JournalError
from sandbridge.terminals import channel, keys
from sandbridge.terminals.active_terminal import FINAL_DRAIN_TIMEOUT, ActiveTerminal, relay
from sandbridge.terminals.admission import (
    Admit,
    Authority,
    Lease,
    Refuse,
    RequestFacts,
    decide_admission,
    decide_lease,
    lease_terms,
)
from sandbridge.terminals.control_line import read_message, write_message
from sandbridge.terminals.fd_io import client_end
from sandbridge.terminals.framed_stream import FramedStream, json_body
from sandbridge.terminals.frames import FROM_CLIENT, Kind
from sandbridge.terminals.journal import AuditLog, ReservationJournal
from sandbridge.terminals.request_record import TerminalRequest
from sandbridge.terminals.request_state import RequestEvent, RequestState
from sandbridge.terminals.settings import STOP_MARGIN, TerminalSettings

# The requester has this long to answer the attach challenge.
PROOF_TIMEOUT = 30.0
# The attach challenge: fresh random bytes the requester's proof must sign.
CHALLENGE_BYTES = 32


class Sandbox(Protocol):
    """Where the broker starts its workers (``broker.py``'s ``WorkerStarter``)."""

    def unavailable(self) -> str | None: ...
    async def start_worker(self) -> tuple[FramedStream, socket.socket]: ...


class Broker(Protocol):
    """What an attach uses of its session's broker (``broker.py``'s ``TerminalBroker``;
    named here, for the broker imports this module and not the reverse)."""

    @property
    def session(self) -> str: ...
    @property
    def instance(self) -> str: ...
    @property
    def settings(self) -> TerminalSettings: ...
    @property
    def sandbox(self) -> Sandbox | None: ...
    @property
    def journal(self) -> ReservationJournal: ...
    @property
    def audit(self) -> AuditLog: ...
    @property
    def on_change(self) -> Callable[[], None]: ...
    def refuse(
        self, request: TerminalRequest | None, code: str, message: str
    ) -> ControlRefusal: ...
    def allowed(self) -> set[str]: ...


def _facts(broker: Broker, request: TerminalRequest) -> RequestFacts:
    return RequestFacts(
        broker.session, broker.instance, request.id, request.request.requester, request.state,
        request.approval_document,
    )  # fmt: skip


def _authority(broker: Broker) -> Authority:
    """The owner's key and the allowed keys as their files say now."""
    return Authority(
        keys.public_hex(keys.owner_public_key()),
        frozenset(broker.allowed()),
        frozenset(keys.trusted_owners()),
    )


async def attach(
    broker: Broker,
    request: TerminalRequest,
    message: dict[str, Any],
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """Serve ``attach`` for ``request`` (the broker found it): the challenge, the
    admission, the reservation, then the terminal until it ends."""
    challenge = secrets.token_bytes(CHALLENGE_BYTES)
    write_message(
        writer,
        {
            "ok": True, "challenge": challenge.hex(), "session": broker.session,
            "instance": broker.instance,
        },
    )  # fmt: skip
    await writer.drain()
    async with asyncio.timeout(PROOF_TIMEOUT):
        proof = await read_message(reader)
    now = time.time()
    decision = decide_admission(
        _facts(broker, request), _authority(broker), challenge, proof, now,
        broker.settings.ready_budget,
    )  # fmt: skip
    if isinstance(decision, Refuse):
        raise broker.refuse(request, decision.code, decision.message)
    # Before the reservation: no approval is spent on a session that cannot start a
    # terminal (a broker without a sandbox; a shim serving no terminal.sock).
    why = (
        "this session has no sandbox to open a terminal in"
        if broker.sandbox is None
        else broker.sandbox.unavailable()
    )
    if why is not None:
        raise broker.refuse(request, "no_sandbox", why)
    seq = _reserve(broker, request, decision, now)
    # Set by serve-stdio (remote/far_terminals.py) for a client on the laptop: its
    # connection closing whole is then the link going, not the client leaving.
    over_link = message.get("over_link") is True
    await _run_terminal(broker, request, decision, seq, reader, writer, over_link)


def _reserve(broker: Broker, request: TerminalRequest, admit: Admit, now: float) -> int:
    """Spend the approval: its nonce in the fsynced journal, before anything starts."""
    try:
        seq = broker.journal.reserve(
            admit.approval.nonce, admit.approval.expires,
            {"session": broker.session, "request": request.id}, now,
        )  # fmt: skip
    except JournalError as exc:
        raise broker.refuse(request, exc.code, str(exc)) from None
    request.process(RequestEvent.ADMIT)
    broker.on_change()
    return seq


async def _run_terminal(  # noqa: PLR0913  (the admission, its reservation, the connection)
    broker: Broker,
    request: TerminalRequest,
    admit: Admit,
    seq: int,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    over_link: bool = False,
) -> None:
    proof = admit.proof
    rows, cols = proof.rows, proof.cols
    broker.audit.record(
        "admission", session=broker.session, request=request.id,
        requester=request.request.requester, rows=rows, cols=cols,
        expires=admit.approval.expires,
    )  # fmt: skip
    client = FramedStream(reader, writer, FROM_CLIENT)
    end, status, counts = "not_ready", -1, [0, 0]
    worker: FramedStream | None = None
    worker_sock: socket.socket | None = None
    try:
        async with asyncio.timeout(broker.settings.ready_budget):
            assert broker.sandbox is not None  # attach refused no_sandbox before
            worker, worker_sock = await broker.sandbox.start_worker()
            lease = lease_terms(admit.approval.expires, time.time(), broker.settings.lease)
            worker.send_json(
                Kind.START,
                {
                    "client_public": proof.client_public.hex(), "rows": rows, "cols": cols,
                    "term": proof.term, "lease": lease.seconds, "final": lease.final,
                    "idle": broker.settings.idle,
                    "hangup_grace": broker.settings.hangup_grace,
                },
            )  # fmt: skip
            await worker.drain()
            ready = await worker.next()
        if ready is None or ready.kind is not Kind.READY:
            raise FrameError("the worker did not answer READY")
        body = json_body(ready)
        public, header = bytes.fromhex(str(body["public"])), bytes.fromhex(str(body["header"]))
        if len(public) != channel.PUBLIC_BYTES or len(header) != channel.HEADER_BYTES:
            raise FrameError("the worker's READY has malformed keys")
        terminal = ActiveTerminal(worker, broker.settings.hangup_grace + STOP_MARGIN)
        request.terminal = terminal
        if request.state is RequestState.REVOKED:  # revoked while starting
            terminal.stop("revoked")
        write_message(writer, {"ok": True, "public": public.hex(), "header": header.hex()})
        await writer.drain()
        log.info("terminal.started", request=request.id, rows=rows, cols=cols)
        end, status = await relay(
            request.id, terminal, client, counts, broker.settings,
            lambda: _renew(broker, request), lambda: client_end(writer, over_link),
        )  # fmt: skip
    except (TimeoutError, FrameError, ValueError, KeyError, OSError, ControlRefusal) as exc:
        log.info("terminal.failed", request=request.id, error=type(exc).__name__)
        if end == "not_ready":
            with contextlib.suppress(OSError):
                write_message(writer, {"ok": False, "code": "not_ready", "error": str(exc)})
    finally:
        if worker is not None:
            await worker.close()
        if worker_sock is not None:
            untrusted_fds.release_socket(worker_sock)
        request.terminal = None
        request.process(RequestEvent.END)
        broker.on_change()
        broker.journal.finish(seq, "aborted" if end == "not_ready" else "ended")
        broker.audit.record(
            "end", session=broker.session, request=request.id,
            requester=request.request.requester, bytes_in=counts[0], bytes_out=counts[1],
            end=end, status=status,
        )  # fmt: skip
        log.info("terminal.ended", request=request.id, end=end, status=status)
    # The client closes once it has read the end. Closed first, the client's next write
    # (a key typed, a heartbeat) would fail with EPIPE and close its side with the end
    # unread: it would say the relay was lost instead of why the terminal ended. Only once
    # relay's last frame said the end: not after a refusal (``not_ready``); a cancel at the
    # session's end never gets here.
    if end != "not_ready":
        await client.until_peer_closes(FINAL_DRAIN_TIMEOUT)


def _renew(broker: Broker, request: TerminalRequest) -> Lease | Refuse:
    """The running terminal's next lease, or why its authority ended."""
    return decide_lease(
        _facts(broker, request), _authority(broker), time.time(), broker.settings.lease
    )
