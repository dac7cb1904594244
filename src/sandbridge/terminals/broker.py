"""The host side of owner-approved terminals: the session's control socket and admission.

One broker per ``sandbridge run`` session. It serves ``control.sock`` in the session's
host-only directory (0600 in a 0700 directory the sandbox never sees): one JSON request
line per connection, one JSON answer line, and for ``attach`` the encrypted relay after
it. The admission path (:meth:`TerminalBroker._admit`) checks, in order: the request is
approved and unused, the attach proof was made with the approved requester's private
key, the owner's approval verifies now (signature, session, expiry), the requester is
still allowed, the approval's remaining life covers the readiness budget; then it
reserves the approval's nonce in the fsynced journal, and only then starts the worker.
The client is acknowledged after the worker says it is ready.

While a terminal runs, the broker relays ciphertext between the client and the worker
(it holds no channel key), and every ``refresh`` seconds re-checks authority and sends
the worker a lease of at most 10 s, capped by the approval's expiry.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from sandbridge import log
from sandbridge.aio import untrusted_fds
from sandbridge.aio.unix_sockets import bind_unix_socket
from sandbridge.exceptions import SandbridgeError
from sandbridge.places.registry import SessionEntry
from sandbridge.protocol.jsonline import decode_json
from sandbridge.terminals import approval as approvals
from sandbridge.terminals import channel, fd_io, keys
from sandbridge.terminals.approval import Approval, Refusal, Request
from sandbridge.terminals.channel import END_REASONS
from sandbridge.terminals.control import short_path
from sandbridge.terminals.framed_stream import FramedStream, json_body
from sandbridge.terminals.frames import FROM_CLIENT, FROM_WORKER, INPUT_WINDOW, FrameError, Kind
from sandbridge.terminals.journal import AuditLog, JournalError, ReservationJournal, state_dir
from sandbridge.terminals.settings import TerminalSettings

# A control request is one short JSON line (a signed document is at most 4 KiB).
MAX_CONTROL_LINE = 16 * 1024
# The requester has this long to answer the attach challenge.
PROOF_TIMEOUT = 30.0
# Requests waiting for the owner, per session: enough for a team, bounded for memory.
MAX_OPEN_REQUESTS = 64
# Requests one session remembers, open and finished: finished ones (denied, revoked,
# ended) stay so ``list`` and ``attach`` can still say what became of them, but a long
# session must not grow without bound; past this, the oldest finished one is forgotten
# (its history is in the audit log). Four times MAX_OPEN_REQUESTS, so open requests
# alone never fill it.
MAX_STORED_REQUESTS = 256
# Keys one session may add with ``terminal allow``: a team, not a directory.
MAX_SESSION_REQUESTERS = 64
# After a STOP, a worker that has not ended within its grace plus this margin is cut off.
STOP_MARGIN = 5.0
# A worker that takes no bytes from its link for this long is gone (or hostile): one
# maximal lease, since a worker that cannot take a lease for that long has lapsed anyway.
WORKER_DRAIN_TIMEOUT = 10.0
START_MESSAGE = b'{"op": "start"}'
# Room for descriptors in a start answer: the one expected plus a few, so that extra ones
# are received and released by the host rather than dropped by the kernel on the loop.
WORKER_FD_ROOM = 4
# The client gets this long to take the last bytes before its connection is closed.
FINAL_DRAIN_TIMEOUT = 5.0


@dataclass
class TerminalRequest:
    """One request and what became of it."""

    id: str
    request: Request
    state: str = "pending"  # pending, approved, denied, revoked, active, ended
    approval_document: dict[str, str] | None = None
    approval: Approval | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    terminal: ActiveTerminal | None = None
    refusals: set[str] = field(default_factory=set)

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "requester": self.request.requester,
            "reason": self.request.reason,
            "created": self.request.created,
            "expires": None if self.approval is None else self.approval.expires,
        }

    def set_state(self, state: str) -> None:
        self.state = state
        self.changed.set()
        self.changed = asyncio.Event()


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


class ControlRefusal(SandbridgeError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class TerminalBroker:
    """Serves one session's control socket; owns its terminal requests."""

    def __init__(
        self,
        entry: SessionEntry,
        sandbox_channel: socket.socket | None,
        settings: TerminalSettings | None = None,
    ) -> None:
        self.entry = entry
        self.session = entry.id
        # A restart (or another session taking the same name) is a new instance: an
        # approval for the old one never opens a terminal in the new one.
        self.instance = secrets.token_hex(8)
        self.settings = TerminalSettings() if settings is None else settings
        self._sandbox = sandbox_channel
        if sandbox_channel is not None:
            sandbox_channel.setblocking(False)
            # Descriptors only with the answer to a start (see _start_worker).
            untrusted_fds.refuse_descriptors(sandbox_channel)
        self._requests: dict[str, TerminalRequest] = {}
        self._server: asyncio.Server | None = None
        self._start_lock = asyncio.Lock()
        self._handlers: set[asyncio.Task[None]] = set()
        self._journal: ReservationJournal | None = None
        self._audit: AuditLog | None = None
        # Keys the owner allowed for this session only (``sandbridge terminal allow``).
        self._session_requesters: set[str] = set()

    @property
    def journal(self) -> ReservationJournal:
        if self._journal is None:
            self._journal = ReservationJournal()
            for record in self._journal.abort_orphans():
                self.audit.record(
                    "end", session=record.get("session"), request=record.get("request"),
                    end="aborted",
                )  # fmt: skip
        return self._journal

    @property
    def audit(self) -> AuditLog:
        if self._audit is None:
            self._audit = AuditLog()
        return self._audit

    async def start(self) -> None:
        """Serve the control socket; a session whose socket cannot be bound runs without
        terminals (and says so) rather than not at all."""
        if state_dir().exists():  # a host that crashed left reservations: mark them aborted
            _ = self.journal
        try:
            with short_path(self.entry.control_socket) as path:
                sock = bind_unix_socket(path)
        except OSError as exc:
            log.warning("terminal.unavailable", error=exc.strerror)
            return
        self._server = await asyncio.start_unix_server(
            self._handle, sock=sock, limit=MAX_CONTROL_LINE
        )

    async def close(self) -> None:
        """End every terminal (``session_end``), then stop serving."""
        if self._server is not None:
            self._server.close()
        for request in self._requests.values():
            if request.terminal is not None:
                request.terminal.stop("session_end")
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=self.settings.hangup_grace + STOP_MARGIN)
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        if self._sandbox is not None:
            untrusted_fds.release_socket(self._sandbox)  # may hold descriptors in flight

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError) as exc:
            log.debug("terminal.control_closed", error=type(exc).__name__)
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            message = await _read_json(reader)
            op = message.get("op")
            if op == "attach":
                await self._attach(message, reader, writer)
                return
            handler = {
                "info": self._info,
                "request": self._request,
                "show": self._show,
                "await": self._await,
                "approve": self._approve,
                "deny": self._deny,
                "revoke": self._revoke,
                "list": self._list,
                "allow": self._allow,
            }.get(str(op))
            if handler is None:
                raise ControlRefusal("unknown_op", f"unknown control request {op!r}")
            answer = await handler(message)
            _write_json(writer, {"ok": True, **answer})
        except (ControlRefusal, Refusal, JournalError) as exc:
            _write_json(writer, {"ok": False, "code": exc.code, "error": str(exc)})
        await writer.drain()

    def _lookup(self, message: dict[str, Any]) -> TerminalRequest:
        request_id = message.get("id")
        request = self._requests.get(str(request_id))
        if request is None:
            raise ControlRefusal("unknown_request", f"no request {request_id!r} in this session")
        return request

    async def _info(self, message: dict[str, Any]) -> dict[str, Any]:
        return {"session": self.session, "instance": self.instance}

    async def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        request = approvals.verify_request(message.get("request"), self.session, self.instance)
        if request.requester not in self._allowed():
            self.audit.record(
                "refusal", session=self.session, requester=request.requester,
                reason_code="not_allowed",
            )  # fmt: skip
            raise ControlRefusal(
                "not_allowed", "this key may not request terminals; the owner can add it to "
                "~/.config/sandbridge/requesters",
            )  # fmt: skip
        open_requests = [r for r in self._requests.values() if r.state in ("pending", "approved")]
        if len(open_requests) >= MAX_OPEN_REQUESTS:
            raise ControlRefusal("too_many", f"{MAX_OPEN_REQUESTS} requests are already open")
        self._forget_finished()
        request_id = f"{self.session}:{secrets.token_hex(4)}"
        self._requests[request_id] = TerminalRequest(request_id, request)
        self.audit.record(
            "request", session=self.session, request=request_id, requester=request.requester,
            reason=request.reason,
        )  # fmt: skip
        log.info("terminal.request", request=request_id, requester=request.requester[:16])
        return {"id": request_id}

    def _forget_finished(self) -> None:
        """Make room for one more request by forgetting the oldest finished ones (already
        audited); a request whose terminal is still closing is kept."""
        finished = [
            request_id
            for request_id, r in self._requests.items()
            if r.state in ("denied", "revoked", "ended") and r.terminal is None
        ]
        excess = len(self._requests) + 1 - MAX_STORED_REQUESTS
        for request_id in finished[: max(0, excess)]:
            del self._requests[request_id]

    async def _show(self, message: dict[str, Any]) -> dict[str, Any]:
        request = self._lookup(message)
        return {
            **request.summary(),
            "session": self.session,
            "instance": self.instance,
            "request": {
                "requester": request.request.requester,
                "reason": request.request.reason,
                "created": request.request.created,
                "nonce": request.request.nonce,
            },
        }

    async def _await(self, message: dict[str, Any]) -> dict[str, Any]:
        request = self._lookup(message)
        while request.state == "pending":
            await request.changed.wait()
        return {"state": request.state}

    async def _approve(self, message: dict[str, Any]) -> dict[str, Any]:
        request = self._lookup(message)
        if request.state != "pending":
            raise ControlRefusal("not_pending", f"request {request.id} is {request.state}")
        document = message.get("approval")
        admitted = approvals.verify_approval(
            document,
            owner=keys.public_hex(keys.owner_public_key()),
            session=self.session,
            instance=self.instance,
            request_id=request.id,
            requester=request.request.requester,
            now=time.time(),
        )
        assert isinstance(document, dict)
        request.approval_document = document
        request.approval = admitted
        request.set_state("approved")
        self.audit.record(
            "approval", session=self.session, request=request.id,
            requester=request.request.requester, ttl=admitted.ttl, expires=admitted.expires,
        )  # fmt: skip
        return {"state": request.state, "expires": admitted.expires}

    async def _deny(self, message: dict[str, Any]) -> dict[str, Any]:
        request = self._lookup(message)
        if request.state != "pending":
            raise ControlRefusal("not_pending", f"request {request.id} is {request.state}")
        request.set_state("denied")
        self.audit.record("denial", session=self.session, request=request.id)
        return {"state": request.state}

    async def _revoke(self, message: dict[str, Any]) -> dict[str, Any]:
        request = self._lookup(message)
        if request.state in ("denied", "ended", "revoked"):
            raise ControlRefusal("not_revocable", f"request {request.id} is {request.state}")
        was_active = request.terminal is not None
        request.set_state("revoked")
        if request.terminal is not None:
            request.terminal.stop("revoked")
        self.audit.record("revocation", session=self.session, request=request.id)
        return {"state": request.state, "was_active": was_active}

    def _allowed(self) -> set[str]:
        """Keys that may request now: the owner's, the user's list, this session's list."""
        return keys.allowed_requesters() | self._session_requesters

    async def _allow(self, message: dict[str, Any]) -> dict[str, Any]:
        if len(self._session_requesters) >= MAX_SESSION_REQUESTERS:
            raise ControlRefusal("too_many", f"{MAX_SESSION_REQUESTERS} keys are already allowed")
        try:
            key = keys.public_hex(keys.parse_public_key(str(message.get("key"))))
        except keys.KeyFileError as exc:
            raise ControlRefusal("malformed", str(exc)) from None
        self._session_requesters.add(key)
        self.audit.record("allow", session=self.session, requester=key)
        return {"allowed": sorted(self._session_requesters)}

    async def _list(self, message: dict[str, Any]) -> dict[str, Any]:
        return {"requests": [request.summary() for request in self._requests.values()]}

    # Admission ---------------------------------------------------------------------------

    def _refuse(self, request: TerminalRequest | None, code: str, message: str) -> ControlRefusal:
        # One audit record per request and reason: a replay loop cannot flood the log (and
        # ids that name no request are only logged, for the same reason).
        if request is not None and code not in request.refusals:
            request.refusals.add(code)
            self.audit.record(
                "refusal", session=self.session,
                request=request.id, reason_code=code,
            )  # fmt: skip
        log.info("terminal.refused", code=code)
        return ControlRefusal(code, message)

    def _authority(self, request: TerminalRequest, now: float) -> Approval:
        """Check the approval against the current state; raise a refusal code if it fails."""
        if request.state == "revoked":
            raise Refusal("revoked", "the approval was revoked")
        if request.approval_document is None:
            raise Refusal("not_approved", "the request is not approved")
        admitted = approvals.verify_approval(
            request.approval_document,
            owner=keys.public_hex(keys.owner_public_key()),
            session=self.session,
            instance=self.instance,
            request_id=request.id,
            requester=request.request.requester,
            now=now,
        )
        if request.request.requester not in self._allowed():
            raise Refusal("not_allowed", "the requester's key is no longer allowed")
        return admitted

    async def _attach(
        self, message: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        request = self._requests.get(str(message.get("id")))
        if request is None:
            raise self._refuse(None, "unknown_request", f"no request {message.get('id')!r}")
        challenge = secrets.token_bytes(32)
        _write_json(
            writer,
            {
                "ok": True, "challenge": challenge.hex(), "session": self.session,
                "instance": self.instance,
            },
        )  # fmt: skip
        await writer.drain()
        async with asyncio.timeout(PROOF_TIMEOUT):
            proof = await _read_json(reader)
        try:
            client_public = bytes.fromhex(str(proof.get("public")))
            signature = bytes.fromhex(str(proof.get("signature")))
            rows, cols = _dimension(proof.get("rows")), _dimension(proof.get("cols"))
            channel.check_size(rows, cols)
            if len(client_public) != channel.PUBLIC_BYTES:
                raise ValueError("public key length")
        except (ValueError, KeyError, TypeError, channel.ChannelError) as exc:
            raise self._refuse(request, "malformed", f"malformed attach proof: {exc}") from None
        term = str(proof.get("term", ""))[:64]
        admitted, seq = self._admit(request, challenge, client_public, signature)
        await self._run_terminal(request, admitted, seq, client_public, rows, cols, term, reader,
                                 writer)  # fmt: skip

    def _admit(
        self, request: TerminalRequest, challenge: bytes, client_public: bytes, signature: bytes
    ) -> tuple[Approval, int]:
        if request.state in ("active", "ended"):
            raise self._refuse(request, "used", "this approval was already used")
        if request.state in ("pending", "denied", "revoked"):
            raise self._refuse(request, "not_approved", f"the request is {request.state}")
        transcript = approvals.attach_transcript(
            self.session, self.instance, request.id, challenge, client_public
        )
        now = time.time()
        try:
            approvals.verify_attach_proof(request.request.requester, transcript, signature)
            admitted = self._authority(request, now)
        except Refusal as exc:
            raise self._refuse(request, exc.code, str(exc)) from None
        if admitted.expires - now < self.settings.ready_budget:
            raise self._refuse(
                request, "too_late", "the approval expires before a terminal could be ready"
            )
        try:
            seq = self.journal.reserve(
                admitted.nonce, admitted.expires,
                {"session": self.session, "request": request.id}, now,
            )  # fmt: skip
        except JournalError as exc:
            raise self._refuse(request, exc.code, str(exc)) from None
        request.set_state("active")
        return admitted, seq

    async def _start_worker(self) -> tuple[FramedStream, socket.socket]:
        """Ask the sandbox entry for a worker; get the host end of its socket.

        Returns the worker's stream and the received socket, which the caller releases
        (:func:`untrusted_fds.release_socket`) once the stream is closed: the stream's
        transport has a duplicate, so its close on the loop is never the last."""
        if self._sandbox is None:
            raise ControlRefusal("no_sandbox", "this session has no sandbox to open a terminal in")
        loop = asyncio.get_running_loop()
        fds: list[int] = []
        try:
            async with self._start_lock:
                untrusted_fds.accept_descriptors(self._sandbox, True)
                try:
                    await loop.sock_sendall(self._sandbox, START_MESSAGE)
                    await fd_io.readable(self._sandbox.fileno())
                    _answer, truncated = untrusted_fds.receive(
                        self._sandbox, 1024, WORKER_FD_ROOM, fds
                    )
                finally:
                    untrusted_fds.accept_descriptors(self._sandbox, False)
            worker_sock = _worker_socket(fds, truncated)
        except BaseException:
            untrusted_fds.release_all(fds)
            raise
        untrusted_fds.refuse_descriptors(worker_sock)
        duplicate = untrusted_fds.for_transport(worker_sock)
        try:
            reader, writer = await asyncio.open_unix_connection(sock=duplicate)
        except BaseException:
            duplicate.close()  # not the last reference: worker_sock holds one
            untrusted_fds.release_socket(worker_sock)
            raise
        return FramedStream(reader, writer, FROM_WORKER), worker_sock

    async def _run_terminal(
        self,
        request: TerminalRequest,
        admitted: Approval,
        seq: int,
        client_public: bytes,
        rows: int,
        cols: int,
        term: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.audit.record(
            "admission", session=self.session, request=request.id,
            requester=request.request.requester, rows=rows, cols=cols, expires=admitted.expires,
        )  # fmt: skip
        client = FramedStream(reader, writer, FROM_CLIENT)
        end, status, counts = "not_ready", -1, [0, 0]
        worker: FramedStream | None = None
        worker_sock: socket.socket | None = None
        try:
            async with asyncio.timeout(self.settings.ready_budget):
                worker, worker_sock = await self._start_worker()
                remaining = admitted.expires - time.time()
                lease = min(self.settings.lease, remaining)
                worker.send_json(
                    Kind.START,
                    {
                        "client_public": client_public.hex(), "rows": rows, "cols": cols,
                        "term": term, "lease": lease, "final": remaining <= self.settings.lease,
                        "idle": self.settings.idle,
                        "hangup_grace": self.settings.hangup_grace,
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
            terminal = ActiveTerminal(worker, self.settings.hangup_grace + STOP_MARGIN)
            request.terminal = terminal
            if request.state == "revoked":  # revoked while starting
                terminal.stop("revoked")
            _write_json(writer, {"ok": True, "public": public.hex(), "header": header.hex()})
            await writer.drain()
            log.info("terminal.started", request=request.id, rows=rows, cols=cols)
            end, status = await self._relay(request, terminal, client, counts)
        except (TimeoutError, FrameError, ValueError, KeyError, OSError, ControlRefusal) as exc:
            log.info("terminal.failed", request=request.id, error=type(exc).__name__)
            if end == "not_ready":
                with contextlib.suppress(OSError):
                    _write_json(writer, {"ok": False, "code": "not_ready", "error": str(exc)})
        finally:
            if worker is not None:
                await worker.close()
            if worker_sock is not None:
                untrusted_fds.release_socket(worker_sock)
            request.terminal = None
            if request.state == "active":
                request.set_state("ended")
            self.journal.finish(seq, "aborted" if end == "not_ready" else "ended")
            self.audit.record(
                "end", session=self.session, request=request.id,
                requester=request.request.requester, bytes_in=counts[0], bytes_out=counts[1],
                end=end, status=status,
            )  # fmt: skip
            log.info("terminal.ended", request=request.id, end=end, status=status)

    async def _relay(
        self,
        request: TerminalRequest,
        terminal: ActiveTerminal,
        client: FramedStream,
        counts: list[int],
    ) -> tuple[str, int]:
        """Ciphertext both ways plus the lease; return the end reason and exit status."""
        worker = terminal.worker
        ended: dict[str, Any] = {}
        window = [0]  # input bytes the worker has not yet said it took
        taken = asyncio.Event()
        tap = None if self.settings.relay_tap is None else open(self.settings.relay_tap, "ab")  # noqa: SIM115

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
            terminal.stop("client")

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
                    async with asyncio.timeout(self.settings.refresh):
                        await terminal.stopped.wait()
                if terminal.stop_reason is not None:
                    break
                await asyncio.sleep(self.settings.refresh_delay)  # test knob: slow authority
                now = time.time()
                try:
                    current = self._authority(request, now)
                except Refusal as exc:
                    terminal.stop(exc.code)
                    break
                remaining = current.expires - now
                worker.send_json(
                    Kind.LEASE,
                    {"seconds": min(self.settings.lease, remaining),
                     "final": remaining <= self.settings.lease},
                )  # fmt: skip
                with contextlib.suppress(TimeoutError):
                    await terminal.drain()

        upstream = asyncio.create_task(worker_to_client())
        downstream = asyncio.create_task(client_to_worker())
        refresher = asyncio.create_task(lease())
        cut_off = asyncio.create_task(terminal.cut_off.wait())
        try:
            # The terminal ends when the worker says so, or at the cut-off that every STOP
            # arms (a worker that ignored it, or stopped reading its link); the client
            # leaving only asks the worker to end.
            await asyncio.wait({upstream, cut_off}, return_when=asyncio.FIRST_COMPLETED)
            if upstream.done() and (error := upstream.exception()) is not None:
                log.info("terminal.worker_refused", request=request.id, error=str(error))
                terminal.stop("protocol")
        finally:
            terminal.disarm()
            if terminal.cut_off.is_set():  # what is still unsent, it would never read
                worker.abort()
            tasks = (upstream, downstream, refresher, cut_off)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if tap is not None:
                tap.close()
        # ENDED comes from the sandbox: only known reasons and a plain int reach the audit.
        reason = ended.get("reason", terminal.stop_reason or "worker_lost")
        if not isinstance(reason, str) or reason not in END_REASONS | {"worker_lost"}:
            reason = "unknown"
        status = ended.get("status", -1)
        if not isinstance(status, int) or isinstance(status, bool) or not -255 <= status <= 255:
            status = -1
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            if not ended:
                client.send_json(Kind.STOP, {"reason": reason})
            async with asyncio.timeout(FINAL_DRAIN_TIMEOUT):  # a client that stopped reading
                await client.drain()
        return str(reason), status


async def _read_json(reader: asyncio.StreamReader) -> dict[str, Any]:
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise ControlRefusal(
            "too_long", f"a control line is limited to {MAX_CONTROL_LINE} bytes"
        ) from None
    try:
        message = decode_json(line, max_bytes=MAX_CONTROL_LINE)
    except ValueError:  # JsonRefused too: deep nesting ([[[...) is refused, not a traceback
        raise ControlRefusal("malformed", "a control line must be one JSON object") from None
    if not isinstance(message, dict):
        raise ControlRefusal("malformed", "a control line must be one JSON object")
    return message


def _dimension(value: Any) -> int:
    """A terminal's rows or columns as the client sent them: a JSON integer, nothing else
    (``1e400`` would overflow, ``true`` or ``24.5`` would be quietly reinterpreted)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"rows and cols must be integers, got {value!r}")
    return value


def _write_json(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    writer.write(json.dumps(message).encode() + b"\n")


def _worker_socket(fds: list[int], truncated: bool) -> socket.socket:
    """The worker's end from a start answer: exactly one Unix stream socket (whose close
    never lingers), else a refusal. Takes ownership of ``fds``."""
    if len(fds) == 1 and not truncated:
        try:
            sock = socket.socket(fileno=fds[0])  # getsockopt: ENOTSOCK for anything else
        except OSError:
            pass
        else:
            fds.clear()
            if sock.family == socket.AF_UNIX and sock.type == socket.SOCK_STREAM:
                sock.setblocking(False)
                return sock
            untrusted_fds.release_socket(sock, reset=True)
    untrusted_fds.release_all(fds)
    raise ControlRefusal("worker_failed", "the sandbox did not start a worker")
