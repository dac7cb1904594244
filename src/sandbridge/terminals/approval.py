"""Signed terminal requests and approvals, and the pure checks that admit them.

A signed document is ``{"body": "<canonical JSON>", "signature": "<hex>"}``: the signature
covers the exact body string, so verification never depends on re-serialising. The
checks take the current time and state as arguments; nothing here does I/O, so every
refusal is table-tested in ``tests/terminals/test_approval.py``.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import nacl.signing

from sandbridge.exceptions import ApprovalRefused
from sandbridge.protocol.jsonline import decode_json
from sandbridge.terminals.keys import public_hex, verify_signature
from sandbridge.terminals.settings import MAX_CLOCK_SKEW

VERSION = 1
# The default lifetime of an approval, as the issue asks: long enough to look around.
DEFAULT_TTL = 10 * 60.0
# An approval can never outlive a working day; its reservation must be kept until it
# expires, and the journal is bounded (see journal.py).
MAX_TTL = 24 * 3600.0
# The shortest approval that can still start a terminal: the readiness budget (5 s)
# plus a second of margin; shorter ones are refused when signed rather than at attach.
MIN_TTL = 6.0
# A reason is shown to the owner on one line and stored in the audit log.
MAX_REASON = 200
# A signed document travels in one control line.
MAX_DOCUMENT_BYTES = 4096
NONCE_HEX = 32
# Integers from here on do not fit a float (its largest finite value is just below).
FLOAT_INTEGER_LIMIT = 2**1024
# Domain separation: a signature made for one purpose can never be taken for another.
REQUEST_CONTEXT = b"sandbridge-terminal-request-v1\x00"
APPROVAL_CONTEXT = b"sandbridge-terminal-approval-v1\x00"
ATTACH_CONTEXT = b"sandbridge-terminal-attach-v1\x00"
ANSWER_CONTEXT = b"sandbridge-terminal-answer-v1\x00"
# The owner's answers that cross the remote link signed: refusing a request, taking an
# approval back.
ANSWER_KINDS = frozenset({"deny", "revoke"})


@dataclass(frozen=True, slots=True)
class Request:
    """A requester's signed ask for a terminal into ``session``."""

    session: str
    instance: str
    requester: str
    reason: str
    created: float
    nonce: str
    # How long the requester asks the approval to last (seconds; None: not said). The
    # owner's approval names its own ttl: this is only the default the owner is offered.
    duration: float | None = None


@dataclass(frozen=True, slots=True)
class Approval:
    """The owner's signed grant of one terminal, to ``requester``, until ``expires``."""

    session: str
    instance: str
    request: str
    requester: str
    expires: float
    ttl: float
    nonce: str
    signer: str = ""  # the owner key that signed it (this machine's or a trusted one)


def canonical(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _sign(key: nacl.signing.SigningKey, context: bytes, body: dict[str, Any]) -> dict[str, str]:
    text = canonical(body)
    signature = key.sign(context + text.encode()).signature
    return {"body": text, "signature": signature.hex()}


def new_nonce() -> str:
    return secrets.token_hex(NONCE_HEX // 2)


def check_duration(value: object, what: str) -> float:
    """A requested duration: a number of seconds an approval may last (``MIN_TTL`` to
    ``MAX_TTL``); :class:`ApprovalRefused` ``bad_duration`` names ``value`` otherwise."""
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not MIN_TTL <= value <= MAX_TTL
    ):
        raise ApprovalRefused(
            "bad_duration",
            f"{what} {value!r:.40} is not a duration from {MIN_TTL:g}s to {MAX_TTL:g}s",
        )
    return float(value)


def sign_request(  # noqa: PLR0913  (every field the requester signs is an argument)
    key: nacl.signing.SigningKey,
    session: str,
    instance: str,
    reason: str,
    now: float,
    duration: float | None = None,
) -> dict[str, str]:
    """A request for a terminal into ``session``, signed by the requester's ``key``
    (``duration``: how long it asks the approval to last; left out when None, so a host
    that predates the field reads the request as before)."""
    if len(reason) > MAX_REASON or not reason.isprintable():
        raise ApprovalRefused(
            "bad_reason", f"--reason must be printable, at most {MAX_REASON} characters"
        )
    body: dict[str, Any] = {
        "version": VERSION,
        "kind": "request",
        "session": session,
        "instance": instance,
        "requester": public_hex(key),
        "reason": reason,
        "created": now,
        "nonce": new_nonce(),
    }
    if duration is not None:
        body["duration"] = check_duration(duration, "--duration")
    return _sign(key, REQUEST_CONTEXT, body)


def sign_approval(
    key: nacl.signing.SigningKey, request_id: str, request: Request, ttl: float, now: float
) -> dict[str, str]:
    """The owner's approval of ``request`` (known by ``request_id``) for ``ttl`` seconds."""
    if not MIN_TTL <= ttl <= MAX_TTL:
        raise ApprovalRefused(
            "bad_ttl", f"--duration {ttl:g}s: choose between {MIN_TTL:g}s and {MAX_TTL:g}s"
        )
    body = {
        "version": VERSION,
        "kind": "approval",
        "session": request.session,
        "instance": request.instance,
        "request": request_id,
        "requester": request.requester,
        "expires": now + ttl,
        "ttl": ttl,
        "nonce": new_nonce(),
    }
    return _sign(key, APPROVAL_CONTEXT, body)


def _open(
    document: object, context: bytes, signers: tuple[str, ...] | None, kind: str
) -> tuple[dict[str, Any], str]:
    """Check a signed document's shape and signature by one of ``signers`` (None: the key
    its body names as ``requester``); return its body and the key that verified it."""
    if (
        not isinstance(document, dict)
        or set(document) != {"body", "signature"}
        or not all(isinstance(v, str) for v in document.values())
    ):
        raise ApprovalRefused("malformed", f"a signed {kind} is {{body, signature}} strings")
    text, signature_hex = document["body"], document["signature"]
    if len(text) > MAX_DOCUMENT_BYTES:
        raise ApprovalRefused("malformed", f"the {kind} is larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        body = decode_json(text, max_bytes=MAX_DOCUMENT_BYTES)
        signature = bytes.fromhex(signature_hex)
    except ValueError:
        raise ApprovalRefused("malformed", f"the {kind} is not JSON with a hex signature") from None
    if not isinstance(body, dict):
        raise ApprovalRefused("malformed", f"the {kind} body is not an object")
    if body.get("version") != VERSION:
        raise ApprovalRefused(
            "unknown_version", f"{kind} version {body.get('version')!r}; this host knows {VERSION}"
        )
    if body.get("kind") != kind:
        raise ApprovalRefused("malformed", f"expected a {kind}, got {body.get('kind')!r}")
    candidates = signers if signers is not None else (body.get("requester"),)
    for key in candidates:
        if isinstance(key, str) and verify_signature(key, context + text.encode(), signature):
            return body, key
    raise ApprovalRefused("bad_signature", f"the {kind}'s signature does not verify")


def _fields(body: dict[str, Any], kind: str, **types: type) -> None:
    """Refuse (``malformed``, naming it) a field missing or of another type; a float
    field may be a JSON integer, but only one a float can hold: the parser takes
    integers of any length, and ``float()`` of a 400-digit one raises OverflowError."""
    for name, kind_type in types.items():
        value = body.get(name)
        if kind_type is float and isinstance(value, int) and not isinstance(value, bool):
            if abs(value) >= FLOAT_INTEGER_LIMIT:
                raise ApprovalRefused(
                    "malformed",
                    f"the {kind}'s {name}, an integer of {len(str(abs(value)))} digits, "
                    "is out of range",
                )
            continue
        if not isinstance(value, kind_type) or isinstance(value, bool):
            raise ApprovalRefused("malformed", f"the {kind}'s {name} is {value!r}")


def verify_request(document: object, session: str, instance: str) -> Request:
    """A request signed by the key it names, for this session instance."""
    body, _ = _open(document, REQUEST_CONTEXT, None, "request")
    _fields(
        body, "request", session=str, instance=str, requester=str, reason=str, created=float,
        nonce=str,
    )  # fmt: skip
    if body["session"] != session or body["instance"] != instance:
        raise ApprovalRefused("wrong_session", f"the request names session {body['session']!r}")
    if len(body["reason"]) > MAX_REASON or not body["reason"].isprintable():
        raise ApprovalRefused(
            "bad_reason", f"the reason must be printable, at most {MAX_REASON} characters"
        )
    duration = body.get("duration")
    return Request(
        body["session"], body["instance"], body["requester"], body["reason"],
        float(body["created"]), body["nonce"],
        None if duration is None else check_duration(duration, "the request's duration"),
    )  # fmt: skip


def verify_approval(  # noqa: PLR0913  (every fact an approval is checked against is an argument)
    document: object,
    *,
    owner: str,
    session: str,
    instance: str,
    request_id: str,
    requester: str,
    now: float,
    trusted_owners: Collection[str] = (),
) -> Approval:
    """Admit an approval only if the owner signed it for this request, key and session,
    and it has not expired at ``now``. ``trusted_owners``: other machines' owner keys this
    machine's owner listed (``owners``), whose signature counts as the owner's.
    Raises :class:`ApprovalRefused` with a documented code."""
    body, signer = _open(document, APPROVAL_CONTEXT, (owner, *sorted(trusted_owners)), "approval")
    _fields(
        body, "approval", session=str, instance=str, request=str, requester=str,
        expires=float, ttl=float, nonce=str,
    )  # fmt: skip
    if body["session"] != session or body["instance"] != instance:
        raise ApprovalRefused(
            "wrong_session", f"the approval is for session {body['session']!r}, not {session!r}"
        )
    if body["request"] != request_id:
        raise ApprovalRefused("wrong_request", f"the approval is for request {body['request']!r}")
    if body["requester"] != requester:
        raise ApprovalRefused(
            "wrong_requester", f"the approval names key {body['requester'][:16]}..."
        )
    if len(body["nonce"]) != NONCE_HEX:
        raise ApprovalRefused(
            "malformed", f"the approval's nonce {body['nonce']!r} is not 32 hex digits"
        )
    if not 0 < float(body["ttl"]) <= MAX_TTL:
        raise ApprovalRefused("bad_ttl", f"the approval's ttl {body['ttl']!r} exceeds {MAX_TTL:g}s")
    if float(body["expires"]) <= now:
        raise ApprovalRefused("expired", "the approval has expired; ask for a new one")
    if float(body["expires"]) - now > float(body["ttl"]) + MAX_CLOCK_SKEW:
        raise ApprovalRefused(
            "bad_ttl",
            f"the approval expires in {float(body['expires']) - now:.0f}s, past its ttl of "
            f"{float(body['ttl']):g}s by more than {MAX_CLOCK_SKEW:g}s: check the signer's clock",
        )
    return Approval(
        body["session"], body["instance"], body["request"], body["requester"],
        float(body["expires"]), float(body["ttl"]), body["nonce"], signer,
    )  # fmt: skip


def sign_answer(
    key: nacl.signing.SigningKey, kind: str, request_id: str, now: float
) -> dict[str, str]:
    """The owner's ``kind`` (``deny`` or ``revoke``) of request ``request_id``, signed to
    cross the remote link (the far machine takes it only from an owner key it trusts)."""
    if kind not in ANSWER_KINDS:
        raise ValueError(f"an answer is one of {sorted(ANSWER_KINDS)}, not {kind!r}")
    body = {
        "version": VERSION, "kind": kind, "request": request_id, "created": now,
        "nonce": new_nonce(),
    }  # fmt: skip
    return _sign(key, ANSWER_CONTEXT, body)


@dataclass(frozen=True, slots=True)
class Answer:
    """An owner's signed deny or revoke, as :func:`verify_answer` admitted it."""

    signer: str  # the owner key that signed it
    nonce: str  # what the journal takes once (a copy of the answer is refused ``used``)
    expires: float  # the last moment this machine's clock accepts it


def verify_answer(
    document: object, *, kind: str, request_id: str, signers: Collection[str], now: float
) -> Answer:
    """``document``, a ``kind`` of ``request_id`` signed by one of ``signers`` within
    :data:`MAX_CLOCK_SKEW` of ``now`` (a copy replayed later is refused; one replayed
    sooner is the journal's to refuse, by its nonce); :class:`ApprovalRefused` with a
    documented code otherwise."""
    if document is None:
        raise ApprovalRefused(
            "bad_signature", f"a {kind} over the remote link must be signed by an owner key"
        )
    body, signer = _open(document, ANSWER_CONTEXT, tuple(sorted(signers)), kind)
    _fields(body, kind, request=str, created=float, nonce=str)
    if body["request"] != request_id:
        raise ApprovalRefused("wrong_request", f"the {kind} is for request {body['request']!r}")
    if len(body["nonce"]) != NONCE_HEX:
        raise ApprovalRefused(
            "malformed", f"the {kind}'s nonce {body['nonce']!r:.40} is not {NONCE_HEX} hex digits"
        )
    created = float(body["created"])
    if abs(created - now) > MAX_CLOCK_SKEW:
        raise ApprovalRefused(
            "expired", f"the {kind} was not signed within {MAX_CLOCK_SKEW:g}s of now: "
            "check the signer's clock",
        )  # fmt: skip
    return Answer(signer, body["nonce"], created + MAX_CLOCK_SKEW)


def attach_transcript(
    session: str, instance: str, request_id: str, challenge: bytes, client_public: bytes
) -> bytes:
    """What the requester signs to attach: it binds its key to this host's fresh challenge
    and to the client's ephemeral channel key, so a stolen request id, a replayed proof or
    a swapped channel key is useless."""
    parts = [session.encode(), instance.encode(), request_id.encode(), challenge, client_public]
    return ATTACH_CONTEXT + b"".join(len(p).to_bytes(2, "big") + p for p in parts)


def verify_attach_proof(requester: str, transcript: bytes, signature: bytes) -> None:
    """Refuse an attach whose proof was not made with the requester's private key."""
    if not verify_signature(requester, transcript, signature):
        raise ApprovalRefused("bad_proof", "the attach proof was not signed by the approved key")
