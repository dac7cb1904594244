"""Approval checks: every refusal by its documented code, table-driven."""

from __future__ import annotations

import json
from collections.abc import Callable

import nacl.signing
import pytest

from sandbridge.exceptions import ApprovalRefused
from sandbridge.terminals import approval
from sandbridge.terminals.approval import Request
from sandbridge.terminals.keys import public_hex
from sandbridge.terminals.settings import MAX_CLOCK_SKEW

OWNER = nacl.signing.SigningKey.generate()
REQUESTER = nacl.signing.SigningKey.generate()
STRANGER = nacl.signing.SigningKey.generate()
NOW = 1_000_000.0
REQUEST = Request("web", "inst1", public_hex(REQUESTER), "look", NOW, "n" * 32)
MAX = approval.MAX_TTL


def signed(ttl: float = 600.0, key: nacl.signing.SigningKey = OWNER) -> dict[str, str]:
    return approval.sign_approval(key, "r1", REQUEST, ttl, NOW)


def resigned(change: Callable[[dict[str, object]], None]) -> dict[str, str]:
    """An approval whose body was changed, then properly signed by the owner."""
    body = json.loads(signed()["body"])
    change(body)
    text = approval.canonical(body)
    return {
        "body": text,
        "signature": OWNER.sign(approval.APPROVAL_CONTEXT + text.encode()).signature.hex(),
    }


def changed(**fields: object) -> dict[str, str]:
    """An approval with ``fields`` changed, signed by the owner."""
    return resigned(lambda body: body.update(fields))


def tampered() -> dict[str, str]:
    document = signed()
    return {**document, "body": document["body"].replace('"ttl":600.0', '"ttl":601.0')}


def verify(document: object, **overrides: object) -> approval.Approval:
    arguments: dict[str, object] = {
        "owner": public_hex(OWNER),
        "session": "web",
        "instance": "inst1",
        "request_id": "r1",
        "requester": public_hex(REQUESTER),
        "now": NOW + 1,
    }
    arguments.update(overrides)
    return approval.verify_approval(document, **arguments)  # type: ignore[arg-type]


def test_a_valid_approval_is_admitted() -> None:
    admitted = verify(signed())
    assert admitted.requester == public_hex(REQUESTER)
    assert admitted.expires == NOW + 600
    assert len(admitted.nonce) == 32


def test_an_approval_by_a_trusted_owner_is_admitted_and_names_its_signer() -> None:
    admitted = verify(signed(key=STRANGER), trusted_owners=[public_hex(STRANGER)])
    assert admitted.signer == public_hex(STRANGER)
    assert verify(signed(), trusted_owners=[public_hex(STRANGER)]).signer == public_hex(OWNER)


def test_a_trusted_owner_does_not_make_a_strangers_approval_valid() -> None:
    other = nacl.signing.SigningKey.generate()
    with pytest.raises(ApprovalRefused) as refused:
        verify(signed(key=other), trusted_owners=[public_hex(STRANGER)])
    assert refused.value.code == "bad_signature"


@pytest.mark.parametrize(
    ("case", "document", "overrides", "code"),
    [
        ("wrong signer", lambda: signed(key=STRANGER), {}, "bad_signature"),
        ("tampered body", tampered, {}, "bad_signature"),
        ("wrong session", signed, {"session": "other"}, "wrong_session"),
        ("restarted session", signed, {"instance": "inst2"}, "wrong_session"),
        ("wrong request", signed, {"request_id": "r2"}, "wrong_request"),
        ("wrong requester", signed, {"requester": public_hex(STRANGER)}, "wrong_requester"),
        ("expired", signed, {"now": NOW + 600}, "expired"),
        ("unknown version", lambda: resigned(lambda b: b.update(version=2)), {}, "unknown_version"),
        ("request, not approval", lambda: resigned(lambda b: b.update(kind="x")), {}, "malformed"),
        ("ttl too long", lambda: resigned(lambda b: b.update(ttl=1e9)), {}, "bad_ttl"),
        ("short nonce", lambda: resigned(lambda b: b.update(nonce="ab")), {}, "malformed"),
        ("bad expires", lambda: resigned(lambda b: b.update(expires="x")), {}, "malformed"),
        ("expires past its ttl", lambda: changed(expires=NOW + 3e7), {}, "bad_ttl"),
        ("expires a day late", lambda: changed(ttl=MAX, expires=NOW + 2 * MAX), {}, "bad_ttl"),
        ("expires not a float", lambda: changed(expires=10**400), {}, "malformed"),
        ("expires NaN", lambda: changed(expires=float("nan")), {}, "malformed"),
        ("not an object", lambda: ["body"], {}, "malformed"),
        ("extra field", lambda: {**signed(), "x": "y"}, {}, "malformed"),
        ("signature not hex", lambda: {**signed(), "signature": "zz"}, {}, "malformed"),
    ],
)  # fmt: skip
def test_approval_refusals(
    case: str,
    document: Callable[[], object],
    overrides: dict[str, object],
    code: str,
) -> None:
    with pytest.raises(ApprovalRefused) as refused:
        verify(document(), **overrides)
    assert refused.value.code == code, case


@pytest.mark.parametrize("ahead", [0.0, 60.0, MAX_CLOCK_SKEW - 1])
def test_a_signer_whose_clock_is_a_little_ahead_is_admitted(ahead: float) -> None:
    # The laptop signs with its clock, the far machine checks with its own.
    assert verify(signed(), now=NOW - ahead).expires == NOW + 600


def test_an_expiry_further_than_its_ttl_and_the_clock_skew_is_refused() -> None:
    # A reservation is kept until its approval expires: one signed to expire in a year
    # (by a trusted owner's key, say a compromised laptop) made 256 of them fill the
    # journal (journal_full) for a year, after the key was taken off the owners file too.
    with pytest.raises(ApprovalRefused, match="clock") as refused:
        verify(signed(), now=NOW - MAX_CLOCK_SKEW - 1)
    assert refused.value.code == "bad_ttl"


@pytest.mark.parametrize("ttl", [1.0, 5.9, 24 * 3600 + 1])
def test_owner_cannot_sign_a_ttl_out_of_range(ttl: float) -> None:
    with pytest.raises(ApprovalRefused, match="--duration"):
        signed(ttl)


def test_request_is_verified_against_the_key_it_names() -> None:
    document = approval.sign_request(REQUESTER, "web", "inst1", "why", NOW)
    assert approval.verify_request(document, "web", "inst1").requester == public_hex(REQUESTER)
    with pytest.raises(ApprovalRefused) as refused:
        approval.verify_request(document, "web", "inst2")
    assert refused.value.code == "wrong_session"
    body = json.loads(document["body"])
    body["requester"] = public_hex(STRANGER)
    forged = {"body": approval.canonical(body), "signature": document["signature"]}
    with pytest.raises(ApprovalRefused) as refused:
        approval.verify_request(forged, "web", "inst1")
    assert refused.value.code == "bad_signature"


def test_a_requested_duration_is_signed_and_read_back() -> None:
    document = approval.sign_request(REQUESTER, "web", "inst1", "why", NOW, 600)
    assert json.loads(document["body"])["duration"] == 600
    assert approval.verify_request(document, "web", "inst1").duration == 600


def test_a_request_without_a_duration_has_none_and_keeps_its_old_shape() -> None:
    # Backward compatible both ways: the field is absent, not null, when not asked.
    document = approval.sign_request(REQUESTER, "web", "inst1", "why", NOW)
    assert "duration" not in json.loads(document["body"])
    assert approval.verify_request(document, "web", "inst1").duration is None


@pytest.mark.parametrize("duration", [24 * 3600 + 1, 5.0, 0, -60, True, "10m", [600]])
def test_a_requested_duration_out_of_bounds_or_malformed_is_refused_naming_it(
    duration: object,
) -> None:
    body = json.loads(approval.sign_request(REQUESTER, "web", "inst1", "", NOW)["body"])
    body["duration"] = duration
    text = approval.canonical(body)
    document = {
        "body": text,
        "signature": REQUESTER.sign(approval.REQUEST_CONTEXT + text.encode()).signature.hex(),
    }
    with pytest.raises(ApprovalRefused) as refused:
        approval.verify_request(document, "web", "inst1")
    assert refused.value.code == "bad_duration"
    assert repr(duration) in str(refused.value)
    with pytest.raises(ApprovalRefused, match="--duration"):
        approval.sign_request(REQUESTER, "web", "inst1", "", NOW, duration)  # type: ignore[arg-type]


def test_request_reason_must_be_printable_and_short() -> None:
    with pytest.raises(ApprovalRefused):
        approval.sign_request(REQUESTER, "web", "i", "a\x1b[2J", NOW)
    with pytest.raises(ApprovalRefused):
        approval.sign_request(REQUESTER, "web", "i", "x" * 201, NOW)


def test_attach_proof_needs_the_requester_key_and_binds_everything() -> None:
    transcript = approval.attach_transcript("web", "i", "r1", b"c" * 32, b"p" * 32)
    approval.verify_attach_proof(
        public_hex(REQUESTER), transcript, REQUESTER.sign(transcript).signature
    )
    other = approval.attach_transcript("web", "i", "r1", b"d" * 32, b"p" * 32)
    for key, message in ((STRANGER, transcript), (REQUESTER, other)):
        with pytest.raises(ApprovalRefused) as refused:
            approval.verify_attach_proof(
                public_hex(REQUESTER), transcript, key.sign(message).signature
            )
        assert refused.value.code == "bad_proof"


def answer(kind: str = "revoke", key: nacl.signing.SigningKey = OWNER) -> dict[str, str]:
    return approval.sign_answer(key, kind, "web:0123abcd", NOW)


def test_a_signed_answer_names_its_signer_nonce_and_expiry() -> None:
    document = answer()
    taken = approval.verify_answer(
        document, kind="revoke", request_id="web:0123abcd",
        signers=[public_hex(STRANGER), public_hex(OWNER)], now=NOW + 1,
    )  # fmt: skip
    assert taken.signer == public_hex(OWNER)
    assert taken.nonce == json.loads(document["body"])["nonce"]
    assert taken.expires == NOW + MAX_CLOCK_SKEW


def _answer_with(**changes: object) -> dict[str, str]:
    body = {**json.loads(answer()["body"]), **changes}
    return approval._sign(OWNER, approval.ANSWER_CONTEXT, body)


@pytest.mark.parametrize(
    ("case", "document", "overrides", "code"),
    [
        ("unsigned", lambda: None, {}, "bad_signature"),
        ("a stranger's", lambda: answer(key=STRANGER), {}, "bad_signature"),
        ("a deny taken for a revoke", lambda: answer("deny"), {}, "malformed"),
        ("another request", answer, {"request_id": "web:89abcdef"}, "wrong_request"),
        ("replayed later", answer, {"now": NOW + MAX_CLOCK_SKEW + 1}, "expired"),
        ("from the future", answer, {"now": NOW - MAX_CLOCK_SKEW - 1}, "expired"),
        ("an approval", signed, {}, "malformed"),
        ("no nonce", lambda: _answer_with(nonce=None), {}, "malformed"),
        ("a short nonce", lambda: _answer_with(nonce="ab"), {}, "malformed"),
    ],
)  # fmt: skip
def test_answer_refusals(
    case: str, document: Callable[[], object], overrides: dict[str, object], code: str
) -> None:
    arguments: dict[str, object] = {
        "kind": "revoke", "request_id": "web:0123abcd", "signers": [public_hex(OWNER)],
        "now": NOW,
    }  # fmt: skip
    arguments.update(overrides)
    with pytest.raises(ApprovalRefused) as refused:
        approval.verify_answer(document(), **arguments)  # type: ignore[arg-type]
    assert refused.value.code == code, case
