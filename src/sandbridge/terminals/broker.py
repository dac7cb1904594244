"""The host side of owner-approved terminals: the session's control socket and requests.

One broker per ``sandbridge run`` session. It serves ``control.sock`` in the session's
host-only directory (0600 in a 0700 directory the sandbox never sees): one JSON request
line per connection, one JSON answer line, and for ``attach`` the encrypted relay after
it. Each request moves along the state table of :mod:`~sandbridge.terminals.request_state`.
An attach (its admission, the approval's reservation, the running terminal whose
authority is re-checked every ``refresh`` seconds) is served by ``attach_server.py``,
which the broker imports at the session's first attach.

The same socket carries the owner's requests for other parts of the session (the egress
requests' ``egress_*`` ops): the session passes them in as ``owner_ops``, so the broker
serves them without knowing what they do.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from sandbridge import log
from sandbridge.aio.before_loop import UNIX_BACKLOG, bind_unix_socket
from sandbridge.aio.tasks import TaskSet
from sandbridge.exceptions import (
    ApprovalRefused,
    ControlRefusal,
    IllegalMove,
    JournalError,
    KeyFileError,
)
from sandbridge.places.socket_path import short_path
from sandbridge.terminals import pending
from sandbridge.terminals.control_line import (
    MAX_CONTROL_LINE,
    read_message,
    refusal_line,
    write_message,
)
from sandbridge.terminals.framed_stream import FramedStream
from sandbridge.terminals.journal import AuditLog, ReservationJournal, state_dir
from sandbridge.terminals.request_record import TerminalRequest
from sandbridge.terminals.request_state import FINISHED, OPEN, RequestEvent, RequestState
from sandbridge.terminals.settings import STOP_MARGIN, TerminalSettings
from sandbridge.terminals.taken_requests import TakenRequests

# The signatures' modules (approval.py, keys.py, and nacl under them) are imported by the
# ops that verify a signature or read a key, the first time one is asked: a session
# nobody asks for a terminal never loads them (docs/architecture.md, "What a command's
# start imports"); an attach's modules likewise (``attach_server.py``).

# Requests waiting for the owner, per session: enough for a team, bounded for memory.
MAX_OPEN_REQUESTS = 64
# Requests one session remembers, open and finished: finished ones (denied, revoked,
# ended) stay so ``list`` and ``attach`` can still say what became of them, but a long
# session must not grow without bound; past this, the oldest finished one is forgotten
# (its history is in the audit log). Four times MAX_OPEN_REQUESTS, so open requests
# alone never fill it.
MAX_STORED_REQUESTS = 256
# Keys whose refused requests (``not_allowed``) one session audits: the first request of
# each, for at most this many keys; the rest are only logged, so a key taken off (or a
# stranger on the link) asking in a loop cannot replace the audit ring's history.
MAX_REFUSED_KEYS_AUDITED = 16
# Keys one session may add with ``terminal allow``: a team, not a directory.
MAX_SESSION_REQUESTERS = 64
# A control client sends its line at once; a silent one held a descriptor of the host (in
# the daemon, every session's) for the session's life: dropped after this long.
CONTROL_LINE_TIMEOUT = 10.0
# Control connections at once: the open requests' requesters and terminals, the owner's
# commands; past it ``busy``, so that a flood cannot take the host's descriptors.
MAX_CONTROL_CONNECTIONS = 2 * MAX_OPEN_REQUESTS

# An op another part of the session serves on the control socket: the request's JSON
# object in, the answer's fields out; a refusal is a ControlRefusal.
OwnerOp = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class WorkerStarter(Protocol):
    """How a session starts workers in its sandbox: the private channel of a ``run``
    (``sandbox_channel.py``) or ``terminal.sock`` of another runtime's (``worker_socket.py``)."""

    def unavailable(self) -> str | None: ...  # why none can start now (no approval spent)
    async def start_worker(self) -> tuple[FramedStream, socket.socket]: ...
    def close(self) -> None: ...


class TerminalBroker:
    """Serves one session's control socket; owns its terminal requests."""

    def __init__(  # noqa: PLR0913  (what a session hands its broker; the last two by name)
        self,
        session: str,
        control_socket: Path,
        sandbox: WorkerStarter | None,
        settings: TerminalSettings | None = None,
        *,
        owner_ops: Mapping[str, OwnerOp] | None = None,
        pending_path: Path | None = None,
    ) -> None:
        self.session = session
        self._owner_ops = dict(owner_ops or {})
        self.control_socket = control_socket
        # Where the instance and the open requests are kept for a restart of the daemon.
        self.pending_path = pending_path
        # A restart (or another session taking the same name) is a new instance: an
        # approval for the old one never opens a terminal in the new one.
        self.instance = secrets.token_hex(8)
        self.settings = TerminalSettings() if settings is None else settings
        self.sandbox = sandbox
        self._requests: dict[str, TerminalRequest] = {}
        self._server: asyncio.Server | None = None
        self._handlers = TaskSet()
        self._journal: ReservationJournal | None = None
        self._audit: AuditLog | None = None
        # Keys the owner allowed for this session only (``sandbridge terminal allow``).
        self._session_requesters: set[str] = set()
        # Keys whose not_allowed refusal is in the audit (MAX_REFUSED_KEYS_AUDITED).
        self._refused_requesters: set[str] = set()
        self._taken_requests = TakenRequests()  # a copy of a request taken is refused
        # Called after each change the owner's dashboard shows (a request, a move).
        self.on_change: Callable[[], None] = lambda: None

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
        self._restore_pending()
        try:
            with short_path(self.control_socket) as path:
                sock = bind_unix_socket(path)
        except OSError as exc:
            log.warning("terminal.unavailable", error=exc.strerror)
            return
        self._server = await asyncio.start_unix_server(
            self._handle, sock=sock, limit=MAX_CONTROL_LINE, backlog=UNIX_BACKLOG
        )

    def _restore_pending(self) -> None:
        """Take the instance and open requests a previous broker of this very session
        kept (the daemon serving it restarted); each is verified again."""
        if self.pending_path is None:
            return
        kept = pending.load(self.pending_path)
        if kept is not None:
            self.instance = kept.instance
            from sandbridge.terminals import keys

            for key in kept.requesters[:MAX_SESSION_REQUESTERS]:
                with contextlib.suppress(KeyFileError):
                    self._session_requesters.add(keys.public_hex(keys.parse_public_key(key)))
            for request_id, document in kept.requests[:MAX_OPEN_REQUESTS]:
                request = self._kept_request(request_id, document)
                if request is not None:
                    self._requests[request_id] = request
            self._taken_requests = TakenRequests(kept.taken)
            log.info("terminal.restored", requests=len(self._requests))
        self._save_pending()

    def _kept_request(self, request_id: str, document: object) -> TerminalRequest | None:
        """A request read back from the file, if it is one this broker could have made:
        an id of this session not yet taken, a document signed for this session and
        instance, by a requester still allowed (the file is never trusted further)."""
        if not pending.names_request_of(request_id, self.session) or request_id in self._requests:
            return None
        from sandbridge.terminals import approval as approvals

        try:
            request = approvals.verify_request(document, self.session, self.instance)
            allowed = request.requester in self.allowed()
        except (ApprovalRefused, KeyFileError):
            return None
        if not allowed:
            return None
        return TerminalRequest(request_id, request, document=document)

    def _save_pending(self) -> None:
        if self.pending_path is None:
            return
        requests = tuple(
            (r.id, r.document) for r in self._requests.values() if r.state is RequestState.PENDING
        )
        requesters = tuple(sorted(self._session_requesters))
        kept = pending.Pending(self.instance, requests, requesters, self._taken_requests.items())
        with contextlib.suppress(OSError):  # the session dir is gone: the session ends
            pending.save(self.pending_path, kept)

    async def close(self) -> None:
        """End every terminal (``session_end``), then stop serving."""
        if self._server is not None:
            self._server.close()
        for request in self._requests.values():
            if request.terminal is not None:
                request.terminal.stop("session_end")
        await self._handlers.close(grace=self.settings.hangup_grace + STOP_MARGIN)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        if self.sandbox is not None:
            self.sandbox.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if len(self._handlers) >= MAX_CONTROL_CONNECTIONS:
                busy = f"{MAX_CONTROL_CONNECTIONS} control connections are open: try again later"
                writer.write(refusal_line("busy", busy))
                await writer.drain()
                return
            with self._handlers.current():
                await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError) as exc:
            log.debug("terminal.control_closed", error=type(exc).__name__)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(CONTROL_LINE_TIMEOUT):  # _handle closes on timeout
                message = await read_message(reader)
            op = message.get("op")
            if op == "attach":
                request = self._requests.get(str(message.get("id")))
                if request is None:
                    raise self.refuse(None, "unknown_request", f"no request {message.get('id')!r}")
                # Admission's and a running terminal's modules are this op's alone: a
                # session nobody attaches to never imports them.
                from sandbridge.terminals.attach_server import attach

                await attach(self, request, message, reader, writer)
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
            }.get(str(op)) or self._owner_ops.get(str(op))
            if handler is None:
                raise ControlRefusal("unknown_op", f"unknown control request {op!r}")
            answer = await handler(message)
            self._save_pending()
            self.on_change()
            write_message(writer, {"ok": True, **answer})
        except (ControlRefusal, ApprovalRefused, JournalError) as exc:
            write_message(writer, {"ok": False, "code": exc.code, "error": str(exc)})
        except KeyFileError as exc:
            # The owner's key or the allowed keys cannot be read safely right now: nothing
            # can be decided, and the owner is told which file and why.
            log.warning("terminal.key_file", error=str(exc))
            write_message(writer, {"ok": False, "code": "key_file", "error": str(exc)})
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
        from sandbridge.terminals import approval as approvals

        request = approvals.verify_request(message.get("request"), self.session, self.instance)
        if request.requester not in self.allowed():
            if (
                request.requester not in self._refused_requesters
                and len(self._refused_requesters) < MAX_REFUSED_KEYS_AUDITED
            ):
                self._refused_requesters.add(request.requester)
                self.audit.record(
                    "refusal", session=self.session, requester=request.requester,
                    reason_code="not_allowed",
                )  # fmt: skip
            log.info("terminal.refused", code="not_allowed", requester=request.requester[:16])
            raise ControlRefusal(
                "not_allowed", "this key may not request terminals; the owner can add it to "
                "~/.config/sandbridge/requesters",
            )  # fmt: skip
        open_requests = [r for r in self._requests.values() if r.state in OPEN]
        if len(open_requests) >= MAX_OPEN_REQUESTS:
            raise ControlRefusal("too_many", f"{MAX_OPEN_REQUESTS} requests are already open")
        self._taken_requests.take(request, time.time())
        self._forget_finished()
        request_id = f"{self.session}:{secrets.token_hex(pending.REQUEST_ID_HEX // 2)}"
        self._requests[request_id] = TerminalRequest(
            request_id, request, document=message.get("request")
        )
        self.audit.record(
            "request", session=self.session, request=request_id, requester=request.requester,
            reason=request.reason, duration=request.duration,
        )  # fmt: skip
        log.info("terminal.request", request=request_id, requester=request.requester[:16])
        return {"id": request_id}

    def _forget_finished(self) -> None:
        """Make room for one more request by forgetting the oldest finished ones (already
        audited); a request whose terminal is still closing is kept."""
        finished = [
            request_id
            for request_id, r in self._requests.items()
            if r.state in FINISHED and r.terminal is None
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
        while request.state is RequestState.PENDING:
            await request.changed.wait()
        return {"state": request.state.value}

    async def _approve(self, message: dict[str, Any]) -> dict[str, Any]:
        request = self._lookup(message)
        if not request.machine.allows(RequestEvent.APPROVE):
            raise ControlRefusal("not_pending", f"request {request.id} is {request.state.value}")
        from sandbridge.terminals import approval as approvals
        from sandbridge.terminals import keys

        document = message.get("approval")
        admitted = approvals.verify_approval(
            document,
            owner=keys.public_hex(keys.owner_public_key()),
            trusted_owners=frozenset(keys.trusted_owners()),
            session=self.session,
            instance=self.instance,
            request_id=request.id,
            requester=request.request.requester,
            now=time.time(),
        )
        assert isinstance(document, dict)
        request.approval_document = document
        request.approval = admitted
        request.process(RequestEvent.APPROVE)
        self.audit.record(
            "approval", session=self.session, request=request.id,
            requester=request.request.requester, ttl=admitted.ttl, expires=admitted.expires,
            owner=admitted.signer,
        )  # fmt: skip
        return {"state": request.state.value, "expires": admitted.expires}

    async def _deny(self, message: dict[str, Any]) -> dict[str, Any]:
        request = self._lookup(message)
        try:
            request.process(RequestEvent.DENY)
        except IllegalMove:
            raise ControlRefusal(
                "not_pending", f"request {request.id} is {request.state.value}"
            ) from None
        self.audit.record("denial", session=self.session, request=request.id)
        return {"state": request.state.value}

    async def _revoke(self, message: dict[str, Any]) -> dict[str, Any]:
        request = self._lookup(message)
        was_active = request.terminal is not None
        try:
            request.process(RequestEvent.REVOKE)
        except IllegalMove:
            raise ControlRefusal(
                "not_revocable", f"request {request.id} is {request.state.value}"
            ) from None
        if request.terminal is not None:
            request.terminal.stop("revoked")
        self.audit.record("revocation", session=self.session, request=request.id)
        return {"state": request.state.value, "was_active": was_active}

    def allowed(self) -> set[str]:
        """Keys that may request now: the owner's, the user's list, this session's list."""
        from sandbridge.terminals import keys

        return keys.allowed_requesters() | self._session_requesters

    async def _allow(self, message: dict[str, Any]) -> dict[str, Any]:
        if len(self._session_requesters) >= MAX_SESSION_REQUESTERS:
            raise ControlRefusal("too_many", f"{MAX_SESSION_REQUESTERS} keys are already allowed")
        from sandbridge.terminals import keys

        try:
            key = keys.public_hex(keys.parse_public_key(str(message.get("key"))))
        except KeyFileError as exc:
            raise ControlRefusal("malformed", str(exc)) from None
        self._session_requesters.add(key)
        self.audit.record("allow", session=self.session, requester=key)
        return {"allowed": sorted(self._session_requesters)}

    def listing(self) -> list[dict[str, Any]]:
        """Every request this session remembers, as ``list`` answers."""
        return [request.summary() for request in self._requests.values()]

    async def _list(self, message: dict[str, Any]) -> dict[str, Any]:
        return {"requests": self.listing()}

    def refuse(self, request: TerminalRequest | None, code: str, message: str) -> ControlRefusal:
        """The refusal of an attach to ``request``, audited."""
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
