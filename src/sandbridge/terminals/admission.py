"""Whether an attach opens a terminal, and the lease a running one gets: pure decisions.

Admission looks at one request (its state and the owner's approval document), the
owner's authority as the broker read it a moment ago, the host's challenge and the
client's attach proof, the time and the readiness budget, and returns :class:`Admit` or
:class:`Refuse` with a documented code (``docs/terminals.md``, "Admission, step by
step"). It reads no file and touches no journal, audit log or socket: the broker gathers
the facts, asks, and carries the decision out; an :class:`Admit` is then reserved in the
journal, which can still refuse ``used`` or ``journal_full``. While the terminal runs,
the broker asks :func:`decide_lease` the same authority question every refresh.

Each refusal is table-tested in ``tests/terminals/test_admission.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbridge.exceptions import ApprovalRefused, ChannelError
from sandbridge.terminals import approval as approvals
from sandbridge.terminals import channel
from sandbridge.terminals.approval import Approval
from sandbridge.terminals.request_state import USED, RequestEvent, RequestState, allows

# The client's TERM travels to the shell's environment; a terminal name is a short word.
MAX_TERM = 64


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """One request as admission sees it."""

    session: str
    instance: str
    request_id: str
    requester: str
    state: RequestState
    approval_document: dict[str, str] | None


@dataclass(frozen=True, slots=True)
class Authority:
    """The owner's authority as read just now: approvals must verify with ``owner`` (a
    replaced owner key voids them) and name a key that is still ``allowed``."""

    owner: str
    allowed: frozenset[str]
    # Other machines' owner keys this machine's owner trusts (the ``owners`` file): an
    # approval one of them signed counts as the owner's; a key taken off the file voids
    # its approvals at the next check.
    trusted_owners: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class AttachProof:
    """The client's answer to the challenge: its ephemeral channel key, the requester's
    signature, and the terminal it wants."""

    client_public: bytes
    signature: bytes
    rows: int
    cols: int
    term: str


@dataclass(frozen=True, slots=True)
class Admit:
    """Open a terminal for ``proof`` under ``approval`` (once its nonce is reserved)."""

    approval: Approval
    proof: AttachProof


@dataclass(frozen=True, slots=True)
class Refuse:
    """Refuse with a documented ``code``; ``message`` is the line the client prints."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Lease:
    """How long the worker may run before the next lease, and whether none will follow
    (the approval expires within this one)."""

    seconds: float
    final: bool


def parse_attach_proof(message: dict[str, Any]) -> AttachProof:
    """The attach proof as the client sent it, or :class:`ApprovalRefused` ``malformed``."""
    try:
        client_public = bytes.fromhex(str(message.get("public")))
        signature = bytes.fromhex(str(message.get("signature")))
        rows, cols = _dimension(message.get("rows")), _dimension(message.get("cols"))
        channel.check_size(rows, cols)
        if len(client_public) != channel.PUBLIC_BYTES:
            raise ValueError("public key length")
    except (ValueError, KeyError, TypeError, ChannelError) as exc:
        raise ApprovalRefused("malformed", f"malformed attach proof: {exc}") from None
    term = str(message.get("term", ""))[:MAX_TERM]
    return AttachProof(client_public, signature, rows, cols, term)


def check_authority(request: RequestFacts, authority: Authority, now: float) -> Approval:
    """The request's approval as it stands at ``now``: not revoked, signed by the owner for
    this request, key and session instance, not expired, its requester still allowed.
    Raises :class:`ApprovalRefused` with a documented code."""
    if request.state is RequestState.REVOKED:
        raise ApprovalRefused("revoked", "the approval was revoked")
    if request.approval_document is None:
        raise ApprovalRefused("not_approved", "the request is not approved")
    admitted = approvals.verify_approval(
        request.approval_document,
        owner=authority.owner,
        trusted_owners=authority.trusted_owners,
        session=request.session,
        instance=request.instance,
        request_id=request.request_id,
        requester=request.requester,
        now=now,
    )
    if request.requester not in authority.allowed:
        raise ApprovalRefused("not_allowed", "the requester's key is no longer allowed")
    return admitted


def decide_admission(  # noqa: PLR0913  (a pure decision: every fact it reads is an argument)
    request: RequestFacts,
    authority: Authority,
    challenge: bytes,
    proof_message: dict[str, Any],
    now: float,
    ready_budget: float,
) -> Admit | Refuse:
    """Admit an attach only if, in this order: its proof is well formed; the request is
    approved and unused; the proof was signed with the requester's key over this
    challenge and channel key; the approval stands now (:func:`check_authority`); and it
    outlives the readiness budget, so no terminal starts that could not become ready."""
    try:
        proof = parse_attach_proof(proof_message)
        if not allows(request.state, RequestEvent.ADMIT):
            if request.state in USED:
                raise ApprovalRefused("used", "this approval was already used")
            raise ApprovalRefused("not_approved", f"the request is {request.state.value}")
        transcript = approvals.attach_transcript(
            request.session, request.instance, request.request_id, challenge,
            proof.client_public,
        )  # fmt: skip
        approvals.verify_attach_proof(request.requester, transcript, proof.signature)
        admitted = check_authority(request, authority, now)
    except ApprovalRefused as exc:
        return Refuse(exc.code, str(exc))
    if admitted.expires - now < ready_budget:
        return Refuse("too_late", "the approval expires before a terminal could be ready")
    return Admit(admitted, proof)


def lease_terms(expires: float, now: float, longest: float) -> Lease:
    """A lease of at most ``longest`` seconds, never past the approval's ``expires``."""
    remaining = expires - now
    return Lease(min(longest, remaining), remaining <= longest)


def decide_lease(
    request: RequestFacts, authority: Authority, now: float, longest: float
) -> Lease | Refuse:
    """The next lease of a running terminal, or why its authority ended."""
    try:
        current = check_authority(request, authority, now)
    except ApprovalRefused as exc:
        return Refuse(exc.code, str(exc))
    return lease_terms(current.expires, now, longest)


def _dimension(value: Any) -> int:
    """A terminal's rows or columns as the client sent them: a JSON integer, nothing else
    (``1e400`` would overflow, ``true`` or ``24.5`` would be quietly reinterpreted)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"rows and cols must be integers, got {value!r}")
    return value
