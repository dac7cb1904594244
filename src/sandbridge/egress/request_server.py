"""The host half of egress requests: the sandbox asks on ``egress.sock``, the owner answers
on the session's control socket.

A request (``sandbridge-allow HOST[:PORT] --reason "why"``, a first line on
``egress.sock``: :mod:`sandbridge.protocol.egress_opening`) is checked and entered in the
session's :class:`~sandbridge.egress.requests.RequestTable`; the owner's terminal gets one
line naming the destination, the reason (escaped) and the exact command that approves
it. The owner's ``sandbridge egress pending|approve|deny`` reach :meth:`owner_ops` through
the session's control socket (host-only; the sandbox never sees it). An approval adds a
grant the gate decides with (:class:`~sandbridge.egress.requests.Grants`); only the
owner's ``--save`` writes a file, one line appended to the project's
``.sandbridge/allow``. Nothing the sandbox sends changes a file by itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

from sandbridge import log
from sandbridge.aio.tasks import first_done, running
from sandbridge.egress.no_gate import OwnerOp
from sandbridge.egress.requests import (
    Address,
    Destination,
    EgressRequest,
    Grants,
    RequestState,
    RequestTable,
    Scope,
    check_reason,
    non_global_only,
    parse_destination,
    saved_line,
    standing,
)
from sandbridge.exceptions import ControlRefusal, EgressRequestRefused, PolicyError
from sandbridge.project.held_folder import HeldFolder
from sandbridge.project.policy import (
    ALLOW_FILE,
    MAX_POLICY_FILE_BYTES,
    Policy,
    host_matches,
    parse_entry,
    parse_ip,
)
from sandbridge.protocol.egress_opening import EgressAsk, encode_reply
from sandbridge.shown_text import quoted

# Askers waiting for the owner at once, per session: each holds one of the gate's
# connections (256 in all), and a flood of waiting helpers must not take them all.
MAX_WAITING = 32


class EgressRequests:
    """One session's egress requests, from the sandbox's ask to the owner's answer."""

    def __init__(  # noqa: PLR0913  (the session's parts, then where to say, when, what is local)
        self,
        session: str,
        policy: Policy,
        grants: Grants,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.time,
        is_local: Callable[[Address], bool] | None = None,
        resolve: Callable[[str], Awaitable[list[Address]]] | None = None,
    ) -> None:
        self.session = session
        self.policy = policy
        self.grants = grants
        self.table = RequestTable()
        self._out = out
        self._clock = clock
        # Whether an address is one of this host's (the gate's bind probe).
        self._is_local = is_local or (lambda _: False)
        # The gate's own resolution (its resolver, its time bound; an empty list when it
        # finds nothing): a request is decided on the addresses the proxy will get.
        self._resolve = resolve
        self._decided: dict[str, asyncio.Event] = {}
        self._waiting = 0
        self._dropping = False
        # Called when a request is entered or decided (the owner's dashboard lists them).
        self.on_change: Callable[[], None] = lambda: None

    def _say(self, text: str) -> None:
        print(f"sandbridge: {text}", file=self._out or sys.stderr, flush=True)

    # --- the sandbox's side ------------------------------------------------------------

    async def serve(
        self, ask: EgressAsk, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Answer one request line; with ``wait``, also the owner's decision."""
        try:
            request = await self._submit(ask)
        except EgressRequestRefused as exc:
            log.debug("egress_request.refused", code=exc.code)
            if exc.code in ("too_many", "rate_limited") and not self._dropping:
                # One line per run of drops: the owner learns of a flood, not each request.
                self._dropping = True
                self._say(f"egress requests from the sandbox are being refused: {exc}")
            writer.write(encode_reply({"ok": False, "code": exc.code, "error": str(exc)}))
            return
        if isinstance(request, str):  # nothing to ask: it is allowed already
            allowed = {"ok": True, "id": None, "state": "allowed", "detail": request}
            writer.write(encode_reply(allowed))
            return
        writer.write(encode_reply({"ok": True, "id": request.id, "state": request.state.value}))
        if not ask.wait:
            return
        if self._waiting >= MAX_WAITING:
            error = (
                f"{MAX_WAITING} askers already wait for the owner; request {request.id} stays "
                "pending: ask again later, or with --no-wait"
            )
            writer.write(encode_reply({"ok": False, "code": "too_many_waiting", "error": error}))
            return
        await writer.drain()
        self._waiting += 1
        try:
            await self._await_decision(request, reader)
        finally:
            self._waiting -= 1
        writer.write(encode_reply(self._outcome(request)))

    async def _submit(self, ask: EgressAsk) -> EgressRequest | str:
        """The request entered (or folded into), or what already allows its destination."""
        destination = parse_destination(ask.destination, self.policy.gate)
        reason = check_reason(ask.reason)
        policy = self.grants.policy(self.policy)
        # Only a name an entry already matches is resolved now (the proxy resolves it for
        # any connection anyway): a name the sandbox made up must not reach a DNS server
        # before the owner says so (no DNS way out, docs/network.md).
        listed = any(host_matches(rule.host, destination.host) for rule in policy.rules)
        addresses = await self._addresses(destination) if listed else []
        local = [address for address in addresses if self._is_local(address)]
        found = standing(policy, destination, addresses, local)
        if found.allowed is not None:
            return f"already {found.allowed}"
        if found.blocked is not None:
            raise EgressRequestRefused("needs_private", found.blocked)
        if found.private:
            destination = dataclasses.replace(destination, private=True)
        now = self._clock()
        self._forget_events(now)
        new_id = f"{self.session}:{secrets.token_hex(4)}"
        cautions = [found.caution, destination.caution_for(self._is_local)]
        warning = "; ".join(text for text in cautions if text) or None
        request, new = self.table.submit(destination, reason, now, new_id, warning)
        if new:
            self._dropping = False
            self.on_change()
            caution = "" if warning is None else f" (WARNING: {warning})"
            self._say(
                f"the sandbox asks for {destination.text}{caution}: egress request "
                f"{request.id}, reason: {quoted(reason)}; approve: sandbridge egress approve "
                f"{request.id} [--once|--session] [--save]; deny: sandbridge egress deny "
                f"{request.id}"
            )
        return request

    async def _addresses(self, destination: Destination) -> list[Address]:
        """What a requested name resolves to now (nothing for an address or a wildcard,
        or when the resolver does not answer in time)."""
        if self._resolve is None or destination.host.startswith("*."):
            return []
        if parse_ip(destination.host) is not None:
            return []
        return await self._resolve(destination.host)

    def _forget_events(self, now: float) -> None:
        """Drop the wake-up events of requests no longer pending (bounded memory)."""
        still = {request.id for request in self.table.pending(now)}
        for request_id in [key for key in self._decided if key not in still]:
            del self._decided[request_id]

    async def _await_decision(self, request: EgressRequest, reader: asyncio.StreamReader) -> None:
        """Until the owner decides, the request expires, or the asker hangs up."""
        decided = self._decided.setdefault(request.id, asyncio.Event())
        remaining = max(0.0, request.created + self.table.ttl - self._clock())
        async with running(decided.wait(), reader.read(1), asyncio.sleep(remaining)) as tasks:
            await first_done(*tasks)
        self.table.expire(self._clock())

    def _outcome(self, request: EgressRequest) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "id": request.id,
            "state": request.state.value,
            "destination": request.destination.text,
        }
        if request.state is RequestState.APPROVED:
            assert request.scope is not None
            return {"ok": True, **fields, "scope": request.scope.value}
        if request.state is RequestState.DENIED:
            error = f"the owner denied egress request {request.id} ({request.destination.text})"
        elif request.state is RequestState.EXPIRED:
            error = f"egress request {request.id} expired unanswered"
        else:
            error = f"egress request {request.id} is still pending"
        return {"ok": False, **fields, "code": request.state.value, "error": error}

    # --- the owner's side -------------------------------------------------------------

    def owner_ops(self) -> dict[str, OwnerOp]:
        """The control-socket ops of ``sandbridge egress``."""
        return {
            "egress_pending": self._pending,
            "egress_approve": self._approve,
            "egress_deny": self._deny,
        }

    async def _pending(self, message: dict[str, Any]) -> dict[str, Any]:
        now = self._clock()
        return {"requests": [r.summary(self.session, now) for r in self.table.pending(now)]}

    def _pending_request(self, message: dict[str, Any]) -> EgressRequest:
        request_id = str(message.get("id"))
        request = self.table.get(request_id)
        self.table.expire(self._clock())
        if request is None:
            raise ControlRefusal("unknown_request", f"no egress request {request_id!r} here")
        if request.state is not RequestState.PENDING:
            raise ControlRefusal(
                "not_pending", f"egress request {request_id} is {request.state.value}"
            )
        return request

    async def _approve(self, message: dict[str, Any]) -> dict[str, Any]:
        request = self._pending_request(message)
        try:
            scope = Scope(message.get("scope"))
        except ValueError:
            raise ControlRefusal(
                "malformed", f"scope must be once or session, got {message.get('scope')!r}"
            ) from None
        asked = request.destination
        await self._settle_private(request, message.get("private") is True)
        try:
            await self._check_reached(request)
            # Those were awaited: a deny, an expiry or another approval may have decided
            # it meanwhile, and nothing is saved for a request no longer pending.
            self._pending_request(message)
        except ControlRefusal:
            request.destination = asked  # a refused "as private" leaves it as it was asked
            raise
        saved = None
        if message.get("save") is True:
            saved = str(self._save(request))
        self._decide(request, RequestState.APPROVED, scope)
        self.grants.add(
            request.destination.rule(f"sandbridge egress approve {request.id} --{scope.value}"),
            scope,
        )
        self._say(
            f"egress request {request.id} approved ({scope.value}): {request.destination.text}"
            + (f"; saved to {saved}" if saved else "")
        )
        return {
            "id": request.id,
            "state": request.state.value,
            "scope": scope.value,
            "destination": request.destination.text,
            "saved": saved,
        }

    async def _check_reached(self, request: EgressRequest) -> None:
        """Refuse a grant that an entry before it would decide against (the request went
        pending while its name resolved to nothing, and now resolves where that entry,
        without ``private``, cannot connect): decided as the proxy will decide it, on the
        name's addresses now, so that nothing is reported as granted that the proxy would
        still refuse. The request stays pending."""
        destination = request.destination
        addresses = await self._addresses(destination)
        local = [address for address in addresses if self._is_local(address)]
        found = standing(self.grants.policy(self.policy), destination, addresses, local)
        if found.blocked is not None:
            raise ControlRefusal("shadowed", found.blocked)

    async def _settle_private(self, request: EgressRequest, private: bool) -> None:
        """Before a grant: with ``private`` (the owner's ``--private``, or a dashboard
        button "as private") the grant says so; without it, a name that now resolves to
        non-global addresses only is refused (the request stays pending), since such a
        grant would be refused at every connection. Resolving here is the owner's doing:
        the proxy will resolve the name anyway once it is granted."""
        asked = request.destination
        if asked.private or parse_ip(asked.host) is not None:
            return
        if private:
            request.destination = dataclasses.replace(asked, private=True)
            return
        addresses = await self._addresses(asked)
        local = [address for address in addresses if self._is_local(address)]
        seen = non_global_only(asked.host, addresses, local)
        if seen is not None:
            raise ControlRefusal(
                "needs_private",
                f"{seen}; a grant of {asked.text} would be refused at every connection: "
                f"approve it as private (sandbridge egress approve {request.id} --private, or "
                'the dashboard\'s "as private" buttons), which lets the proxy connect the '
                "name to whatever address its DNS gives, this host's loopback included, or "
                "deny it",
            )

    async def _deny(self, message: dict[str, Any]) -> dict[str, Any]:
        request = self._pending_request(message)
        self._decide(request, RequestState.DENIED, None)
        self._say(f"egress request {request.id} denied: {request.destination.text}")
        return {"id": request.id, "state": request.state.value}

    def _decide(self, request: EgressRequest, state: RequestState, scope: Scope | None) -> None:
        try:
            self.table.decide(request.id, state, scope, self._clock())
        except EgressRequestRefused as exc:
            raise ControlRefusal(exc.code, str(exc)) from None
        event = self._decided.pop(request.id, None)
        if event is not None:
            event.set()
        self.on_change()

    def _save(self, request: EgressRequest) -> Path:
        """Append the request's line to the project's ``.sandbridge/allow``."""
        project = self.policy.project
        if project is None:
            raise ControlRefusal("no_project", "this session read no project policy to save to")
        line = saved_line(request.destination, request.reason, time.strftime("%Y-%m-%d"))
        try:  # the line must read back as exactly the destination asked for
            entry = parse_entry(line.split("#", 1)[0], "saved line")
        except PolicyError as exc:
            raise ControlRefusal("save_failed", str(exc)) from None
        asked = request.destination
        if (entry.host, entry.port, entry.private) != (asked.host, asked.port, asked.private):
            raise ControlRefusal("save_failed", f"the line {line!r} does not read back")
        path = project / ALLOW_FILE
        try:
            append_line(path, line)
        except OSError as exc:
            raise ControlRefusal("save_failed", f"cannot write {path}: {exc.strerror}") from None
        return path


def append_line(path: Path, line: str) -> None:
    """Append ``line`` to the policy file at ``path`` (created 0644 if missing), never
    through a symbolic link, on a line of its own, within the policy file size limit.

    ``path`` is ``PROJECT/.sandbridge/allow``: the project's own path is the owner's, but
    the sandbox can swap ``.sandbridge`` for a link at any moment (a rename exchange in a
    loop), between a check of the path and its open. So the folder is held by its
    descriptor (:mod:`sandbridge.project.held_folder`), and the file opened by it."""
    folder = HeldFolder.make(path.parent)
    with folder:
        fd = folder.open_file(path.name, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    try:
        size = os.fstat(fd).st_size
        if size + len(line.encode()) + 1 > MAX_POLICY_FILE_BYTES:
            raise OSError(errno.EFBIG, f"{path} would pass {MAX_POLICY_FILE_BYTES} bytes")
        prefix = b""
        if size:
            os.lseek(fd, size - 1, os.SEEK_SET)
            if os.read(fd, 1) != b"\n":
                prefix = b"\n"
        os.write(fd, prefix + line.encode())
    finally:
        os.close(fd)
