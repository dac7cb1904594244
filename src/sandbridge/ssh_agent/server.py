"""The sandbox's ``SSH_AUTH_SOCK``: ``ssh-agent.sock`` in the runtime dir, served here.

Each message is read by the sans-I/O core (protocol/ssh_agent.py) and answered from the
owner's own agent (the host's ``SSH_AUTH_SOCK``), reached per request through asyncssh's
agent client, which forwards a sign request's flags as given. Only the keys the owner
chose (choice.py) are listed, and only they are signed with; the owner's agent socket
itself is never in the sandbox's view. Every sign request is logged and counted
(signature_log.py). A key in ``session`` or ``each`` mode (choice.py) asks the owner
first (aio/owner_questions.py: the session's terminal and the dashboard); a no, no answer
in time, or no one to ask is the protocol's failure, logged with that reason.

A hostile client costs nothing else: a message is at most
:data:`~sandbridge.protocol.ssh_agent.MAX_MESSAGE_BYTES`, a connection answers at most
:data:`MAX_MESSAGES_PER_CONNECTION`, at most :data:`MAX_AGENT_CONNECTIONS` are open,
connections are accepted at a paced rate, and signatures are rate-limited per session.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import asyncssh

from sandbridge import log
from sandbridge.aio.bridge_service import BridgeLimits, BridgeService
from sandbridge.aio.owner_questions import OwnerQuestions, Verdict
from sandbridge.exceptions import PolicyError
from sandbridge.protocol import ssh_agent as wire
from sandbridge.protocol.limits import WindowLimit
from sandbridge.ssh_agent.choice import Confirm, KeyChoice
from sandbridge.ssh_agent.signature_log import KeyCount, SignatureLog

# ssh holds one connection for its session, git one per signature, an agent's tools a
# few at once: 16 is more than any of them needs and bounds what a flood holds open.
MAX_AGENT_CONNECTIONS = 16
# New connections accepted per second: a loop reconnecting at full speed is paced.
AGENT_CONNECTION_RATE = 50
# A login lists keys and signs once or twice; a rebase that signs every commit
# reconnects for each. 1000 messages on one connection is none of that: a flood.
MAX_MESSAGES_PER_CONNECTION = 1000
# Signatures per SIGN_WINDOW seconds, per session: a rebase of 100 signed commits fits
# in a minute; a sandbox signing in a loop is refused past it (and each refusal logged).
MAX_SIGNATURES = 120
SIGN_WINDOW = 60.0
# How long the owner's agent may take to answer (one that asks its owner to confirm,
# ssh-add -c, waits for a click): past it the request fails, the session goes on.
OWNER_AGENT_TIMEOUT = 60.0
# Bytes read from the socket at a time.
READ_BYTES = 64 * 1024


class AgentBridge:
    """Serves ``path`` for one session, with the keys of ``choice`` from the owner's
    agent at ``owner_agent``."""

    def __init__(  # noqa: PLR0913  (one session's parts)
        self,
        path: Path,
        choice: KeyChoice,
        owner_agent: str,
        signatures: SignatureLog,
        questions: OwnerQuestions | None = None,
        max_signatures: int = MAX_SIGNATURES,
    ) -> None:
        self.path = path
        self.choice = choice
        # The fingerprints of the keys chosen, as :meth:`check` found them at the start,
        # each with its confirmation mode.
        self._pinned: dict[str, Confirm] = {}
        # The ``session`` keys the owner said yes to, and one lock per such key so that
        # the signatures waiting share one question.
        self._allowed: set[str] = set()
        self._asking: dict[str, asyncio.Lock] = {}
        self.questions = OwnerQuestions(None, listed=False) if questions is None else questions
        self.owner_agent = owner_agent
        self.log = signatures
        self._service = BridgeService(
            path,
            self._serve_messages,
            BridgeLimits(AGENT_CONNECTION_RATE, MAX_AGENT_CONNECTIONS),
            lambda _writer: log.debug("ssh_agent.refused", reason="too many open connections"),
            "ssh_agent",
        )
        self._signatures = WindowLimit(max_signatures, SIGN_WINDOW)

    async def _owner_keys(self) -> list[tuple[bytes, bytes]]:
        """Every key the owner's agent holds now, as ``(blob, comment)``."""
        async with asyncio.timeout(OWNER_AGENT_TIMEOUT):
            agent = await asyncssh.connect_agent(self.owner_agent)
            try:
                keys = await agent.get_keys()
            finally:
                agent.close()
                with contextlib.suppress(OSError):
                    await agent.wait_closed()
        return [(key.public_data, key.get_comment_bytes() or b"") for key in keys]

    async def offered(self) -> list[tuple[bytes, bytes]]:
        """The chosen keys the owner's agent holds now, as ``(blob, comment)``: those
        :meth:`check` found, by fingerprint (a key added later under a chosen comment is
        not one the owner chose)."""
        pairs = await self._owner_keys()
        return [
            (blob, comment) for blob, comment in pairs if wire.fingerprint(blob) in self._pinned
        ]

    async def check(self) -> list[tuple[bytes, bytes]]:
        """Refuse (:class:`PolicyError`) an unreachable owner's agent, or a chosen key it
        does not hold; return the keys offered."""
        try:
            pairs = await self._owner_keys()
        except (OSError, ValueError, TimeoutError) as exc:
            raise PolicyError(
                f"--ssh-agent: the owner's agent at {self.owner_agent} does not answer "
                f"({exc or 'timed out'}); start ssh-agent and ssh-add the keys first"
            ) from None
        missing = self.choice.unmatched(pairs)
        if missing:
            raise PolicyError(
                f"--ssh-agent {','.join(missing)}: no key in the owner's agent has this "
                "fingerprint or comment; ssh-add -l lists the keys it holds"
            )
        for comment, fingerprints in self.choice.ambiguous(pairs).items():
            raise PolicyError(
                f"--ssh-agent {comment}: {len(fingerprints)} keys in the owner's agent have "
                f"this comment ({', '.join(fingerprints)}); name the one by its fingerprint"
            )
        chosen = [(blob, comment) for blob, comment in pairs if self.choice.offers(blob, comment)]
        self._pinned = {
            wire.fingerprint(blob): self.choice.mode_of(blob, comment) for blob, comment in chosen
        }
        return chosen

    async def start(self) -> None:
        """Check the owner's agent (:meth:`check`), then listen on :attr:`path` (0600)."""
        chosen = await self.check()
        self.log.chosen(
            [
                KeyCount(key, comment.decode("utf-8", "replace"), mode=self._pinned[key].value)
                for key, comment in ((wire.fingerprint(b), c) for b, c in chosen)
            ]
        )
        self._service.start()

    async def close(self) -> None:
        """Stop accepting and end every open connection."""
        await self._service.close()

    async def _serve_messages(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        frames = wire.FrameReader()
        answered = 0
        while data := await reader.read(READ_BYTES):
            for message in frames.feed(data):
                answered += 1
                if answered > MAX_MESSAGES_PER_CONNECTION:
                    log.debug("ssh_agent.closed", reason="message limit of the connection")
                    return
                writer.write(await self._answer(wire.parse_message(message)))
                await writer.drain()

    async def _answer(self, request: wire.AgentRequest) -> bytes:
        if isinstance(request, wire.IdentitiesRequest):
            try:
                return wire.identities_answer(await self.offered())
            except (OSError, ValueError, TimeoutError) as exc:
                log.debug("ssh_agent.owner_agent_failed", error=str(exc) or "timed out")
                return wire.failure()
        if isinstance(request, wire.SignRequest):
            return await self._sign(request)
        log.debug("ssh_agent.unanswered", type=request.message_type, reason=request.reason)
        return wire.failure()

    async def _sign(self, request: wire.SignRequest) -> bytes:
        key = wire.fingerprint(request.key_blob)
        signed_for = wire.describe(wire.describe_signed_data(request.data))
        try:
            offered = dict(await self.offered())
        except (OSError, ValueError, TimeoutError) as exc:
            offered = {}
            reason = f"the owner's agent does not answer ({exc or 'timed out'})"
        else:
            reason = ""
        comment = offered.get(request.key_blob)
        if comment is None:
            self.log.record(
                signed=False, key=key, comment="", offered=False, signed_for=signed_for,
                reason=reason or "not a key the owner chose",
            )  # fmt: skip
            return wire.failure()
        shown = comment.decode("utf-8", "replace")
        loop = asyncio.get_running_loop()
        if not self._signatures.admit(loop.time()):
            self.log.record(
                signed=False, key=key, comment=shown, offered=True, signed_for=signed_for,
                reason=f"over {self._signatures.limit} signatures in {SIGN_WINDOW:.0f} s",
            )  # fmt: skip
            return wire.failure()
        verdict = await self._confirm(key, shown, signed_for)
        if verdict is not Verdict.YES:
            self.log.record(
                signed=False, key=key, comment=shown, offered=True, signed_for=signed_for,
                reason=verdict.reason,
            )  # fmt: skip
            return wire.failure()
        try:
            signature = await self._owner_sign(request)
        except (OSError, ValueError, TimeoutError) as exc:
            self.log.record(
                signed=False, key=key, comment=shown, offered=True, signed_for=signed_for,
                reason=f"the owner's agent refused ({exc or 'timed out'})",
            )  # fmt: skip
            return wire.failure()
        self.log.record(
            signed=True, key=key, comment=shown, offered=True, signed_for=signed_for, reason=""
        )
        return wire.sign_response(signature)

    async def _confirm(self, key: str, comment: str, signed_for: str) -> Verdict:
        """Whether the owner allows this signature, as the key's mode says (asked if
        need be). A ``session`` key's yes holds for the rest of the session; its no
        refuses this signature only."""
        mode = self._pinned.get(key, Confirm.EACH)
        if mode is Confirm.ALWAYS:
            return Verdict.YES
        text = f"the sandbox asks to sign with your key {key} ({comment!r}): {signed_for}"
        if mode is Confirm.EACH:  # every signature its own question (at most MAX_WAITING)
            return await self.questions.ask("ssh-agent", text, "allow this signature?")
        async with self._asking.setdefault(key, asyncio.Lock()):  # those waiting share a yes
            if key in self._allowed:
                return Verdict.YES
            verdict = await self.questions.ask(
                "ssh-agent", text, "allow this key's signatures for the rest of the session?"
            )
            if verdict is Verdict.YES:
                self._allowed.add(key)
            return verdict

    async def _owner_sign(self, request: wire.SignRequest) -> bytes:
        async with asyncio.timeout(OWNER_AGENT_TIMEOUT):
            agent = await asyncssh.connect_agent(self.owner_agent)
            try:
                return await agent.sign(request.key_blob, request.data, request.flags)
            finally:
                agent.close()
                with contextlib.suppress(OSError):
                    await agent.wait_closed()
