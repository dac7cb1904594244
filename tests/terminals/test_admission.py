"""The attach decision and the lease: every refusal by its documented code, table-driven.

No files, sockets or journal: admission is a pure function of the facts the broker
gathers, so each case changes one fact of an attach that would otherwise be admitted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import nacl.signing
import pytest

from sandbridge.terminals import approval, channel
from sandbridge.terminals.admission import (
    MAX_TERM,
    Admit,
    Authority,
    Lease,
    Refuse,
    RequestFacts,
    decide_admission,
    decide_lease,
    lease_terms,
)
from sandbridge.terminals.approval import Request
from sandbridge.terminals.keys import public_hex
from sandbridge.terminals.request_state import RequestState

OWNER = nacl.signing.SigningKey.generate()
REQUESTER = nacl.signing.SigningKey.generate()
STRANGER = nacl.signing.SigningKey.generate()
NOW = 1_000_000.0
TTL = 600.0
READY_BUDGET = 5.0
LONGEST_LEASE = 10.0
SESSION, INSTANCE, REQUEST_ID = "web", "0123456789abcdef", "web:0123abcd"
CHALLENGE = bytes(range(32))
CLIENT_PUBLIC, _ = channel.keypair()


def request(requester: nacl.signing.SigningKey = REQUESTER, instance: str = INSTANCE) -> Request:
    return Request(SESSION, instance, public_hex(requester), "stuck build", NOW, "n" * 32)


def signed_approval(
    key: nacl.signing.SigningKey = OWNER,
    request_id: str = REQUEST_ID,
    asked: Request | None = None,
) -> dict[str, str]:
    return approval.sign_approval(key, request_id, asked or request(), TTL, NOW)


FACTS = RequestFacts(
    SESSION, INSTANCE, REQUEST_ID, public_hex(REQUESTER), RequestState.APPROVED,
    signed_approval(),
)  # fmt: skip
AUTHORITY = Authority(public_hex(OWNER), frozenset({public_hex(OWNER), public_hex(REQUESTER)}))


def proof(
    key: nacl.signing.SigningKey = REQUESTER, challenge: bytes = CHALLENGE, **fields: Any
) -> dict[str, Any]:
    transcript = approval.attach_transcript(SESSION, INSTANCE, REQUEST_ID, challenge, CLIENT_PUBLIC)
    message: dict[str, Any] = {
        "public": CLIENT_PUBLIC.hex(), "signature": key.sign(transcript).signature.hex(),
        "rows": 24, "cols": 80, "term": "xterm-256color",
    }  # fmt: skip
    message.update(fields)
    return message


def decide(
    facts: RequestFacts = FACTS,
    authority: Authority = AUTHORITY,
    proof_message: dict[str, Any] | None = None,
    now: float = NOW + 1,
) -> Admit | Refuse:
    message = proof() if proof_message is None else proof_message
    return decide_admission(facts, authority, CHALLENGE, message, now, READY_BUDGET)


def test_an_approved_unused_request_with_a_good_proof_is_admitted() -> None:
    decision = decide()
    assert isinstance(decision, Admit)
    assert decision.approval.expires == NOW + TTL
    assert decision.approval.requester == public_hex(REQUESTER)
    assert (decision.proof.rows, decision.proof.cols) == (24, 80)
    assert decision.proof.client_public == CLIENT_PUBLIC
    assert decision.proof.term == "xterm-256color"


def test_the_terminal_name_is_cut_to_a_short_word() -> None:
    decision = decide(proof_message=proof(term="x" * 1000))
    assert isinstance(decision, Admit)
    assert decision.proof.term == "x" * MAX_TERM


def state(value: RequestState) -> RequestFacts:
    return dataclasses.replace(FACTS, state=value)


def approval_document(document: dict[str, str] | None) -> RequestFacts:
    return dataclasses.replace(FACTS, approval_document=document)


REFUSALS: dict[str, tuple[str, dict[str, Any]]] = {
    "a channel key that is not hex": ("malformed", {"proof_message": proof(public="zz")}),
    "a short channel key": ("malformed", {"proof_message": proof(public="00" * 31)}),
    "a signature that is not hex": ("malformed", {"proof_message": proof(signature=None)}),
    "rows that are not an integer": ("malformed", {"proof_message": proof(rows=24.5)}),
    "rows that are a boolean": ("malformed", {"proof_message": proof(rows=True)}),
    "no columns": ("malformed", {"proof_message": proof(cols=None)}),
    "a size out of range": ("malformed", {"proof_message": proof(rows=0)}),
    "a pending request": ("not_approved", {"facts": state(RequestState.PENDING)}),
    "a denied request": ("not_approved", {"facts": state(RequestState.DENIED)}),
    "a revoked request": ("not_approved", {"facts": state(RequestState.REVOKED)}),
    "a request whose terminal runs": ("used", {"facts": state(RequestState.ACTIVE)}),
    "a request whose terminal ended": ("used", {"facts": state(RequestState.ENDED)}),
    "a proof by another key": ("bad_proof", {"proof_message": proof(key=STRANGER)}),
    "a proof over another challenge": ("bad_proof", {"proof_message": proof(challenge=b"x")}),
    "an approval the owner did not sign": (
        "bad_signature", {"facts": approval_document(signed_approval(key=STRANGER))},
    ),
    "an owner key replaced since the approval": (
        "bad_signature", {"authority": Authority(public_hex(STRANGER), AUTHORITY.allowed)},
    ),
    "an approval for the session's previous instance": (
        "wrong_session",
        {"facts": approval_document(signed_approval(asked=request(instance="old")))},
    ),
    "an approval of another request": (
        "wrong_request", {"facts": approval_document(signed_approval(request_id="web:ffffffff"))},
    ),
    "an approval naming another key": (
        "wrong_requester", {"facts": approval_document(signed_approval(asked=request(STRANGER)))},
    ),
    "an expired approval": ("expired", {"now": NOW + TTL}),
    "a trusted owner's approval once its key is off the owners file": (
        "bad_signature",
        {"facts": approval_document(signed_approval(STRANGER)), "authority": AUTHORITY},
    ),
    "a requester no longer allowed": (
        "not_allowed", {"authority": Authority(public_hex(OWNER), frozenset({public_hex(OWNER)}))},
    ),
    "an approval that expires within the readiness budget": (
        "too_late", {"now": NOW + TTL - READY_BUDGET + 0.5},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(REFUSALS))
def test_attach_refusals(case: str) -> None:
    code, changes = REFUSALS[case]
    decision = decide(**changes)
    assert isinstance(decision, Refuse)
    assert decision.code == code, decision.message


def test_a_malformed_proof_is_refused_before_anything_is_looked_up() -> None:
    decision = decide(facts=state(RequestState.ENDED), proof_message=proof(rows="24"))
    assert decision == Refuse(
        "malformed", "malformed attach proof: rows and cols must be integers, got '24'"
    )


def test_a_used_approval_is_refused_before_its_proof_is_checked() -> None:
    decision = decide(facts=state(RequestState.ENDED), proof_message=proof(key=STRANGER))
    assert decision == Refuse("used", "this approval was already used")


def test_a_refusal_for_the_state_names_the_state() -> None:
    decision = decide(facts=state(RequestState.DENIED))
    assert decision == Refuse("not_approved", "the request is denied")


def test_an_attach_exactly_one_readiness_budget_before_expiry_is_admitted() -> None:
    assert isinstance(decide(now=NOW + TTL - READY_BUDGET), Admit)


def test_a_lease_runs_its_full_length_while_the_approval_lasts() -> None:
    assert decide_lease(FACTS, AUTHORITY, NOW + 1, LONGEST_LEASE) == Lease(LONGEST_LEASE, False)


def test_the_last_lease_ends_with_the_approval_and_says_it_is_final() -> None:
    lease = decide_lease(FACTS, AUTHORITY, NOW + TTL - 3, LONGEST_LEASE)
    assert lease == Lease(3.0, True)


def test_a_lease_exactly_as_long_as_the_approvals_rest_is_final() -> None:
    assert lease_terms(NOW + LONGEST_LEASE, NOW, LONGEST_LEASE) == Lease(LONGEST_LEASE, True)


LEASE_REFUSALS: dict[str, tuple[str, dict[str, Any]]] = {
    "a revoked request": ("revoked", {"facts": state(RequestState.REVOKED)}),
    "no approval": ("not_approved", {"facts": approval_document(None)}),
    "an expired approval": ("expired", {"now": NOW + TTL}),
    "an owner key replaced since the approval": (
        "bad_signature", {"authority": Authority(public_hex(STRANGER), AUTHORITY.allowed)},
    ),
    "a trusted owner's approval once its key is off the owners file": (
        "bad_signature",
        {"facts": approval_document(signed_approval(STRANGER)), "authority": AUTHORITY},
    ),
    "a requester no longer allowed": (
        "not_allowed", {"authority": Authority(public_hex(OWNER), frozenset({public_hex(OWNER)}))},
    ),
}  # fmt: skip


def test_an_approval_by_a_trusted_owner_is_admitted_and_leased() -> None:
    trusting = dataclasses.replace(AUTHORITY, trusted_owners=frozenset({public_hex(STRANGER)}))
    facts = approval_document(signed_approval(STRANGER))
    decision = decide(facts, trusting)
    assert isinstance(decision, Admit), decision
    assert decision.approval.signer == public_hex(STRANGER)
    assert isinstance(decide_lease(facts, trusting, NOW + 1, LONGEST_LEASE), Lease)


@pytest.mark.parametrize("case", list(LEASE_REFUSALS))
def test_lease_refusals(case: str) -> None:
    code, changes = LEASE_REFUSALS[case]
    arguments: dict[str, Any] = {"facts": FACTS, "authority": AUTHORITY, "now": NOW + 1}
    arguments.update(changes)
    decision = decide_lease(
        arguments["facts"], arguments["authority"], arguments["now"], LONGEST_LEASE
    )
    assert isinstance(decision, Refuse)
    assert decision.code == code, decision.message
