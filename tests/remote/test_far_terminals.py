"""The far side's check of a terminal control stream's first line (remote/far_terminals.py)."""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path

import nacl.signing
import pytest

from sandbridge.remote import far_terminals
from sandbridge.remote.far_terminals import (
    LINK_OPS,
    answer_refusal,
    check_first_line,
    mark_attach,
)
from sandbridge.terminals import approval, keys
from sandbridge.terminals.approval import ANSWER_KINDS
from sandbridge.terminals.journal import ANSWERED, ReservationJournal
from sandbridge.terminals.settings import MAX_CLOCK_SKEW


@pytest.mark.parametrize("op", sorted(LINK_OPS))
def test_the_terminal_ops_cross(op: str) -> None:
    assert check_first_line(f'{{"op":"{op}","id":"web:0123abcd"}}\n'.encode()) is None


@pytest.mark.parametrize(
    ("line", "refusal"),
    [
        (b'{"op":"allow","key":"00"}\n', "op 'allow' is not served over the remote link"),
        (b'{"op":"stop"}\n', "op 'stop' is not served over the remote link"),
        (b'{"op":"egress_approve","id":"x"}\n', "op 'egress_approve' is not served"),
        (b'{"op":"app_close","port":80}\n', "op 'app_close' is not served"),
        (b'{"op":"session_info"}\n', "op 'session_info' is not served"),
        (b'{"op":["list"]}\n', "op ['list'] is not served"),
        (b'{"id":"x"}\n', "op None is not served"),
        (b'["op","list"]\n', "one JSON object"),
        (b"not json\n", "one JSON object"),
        (b"[" * 100 + b"]" * 100 + b"\n", "one JSON object"),
    ],
)
def test_anything_else_is_refused_naming_it(line: bytes, refusal: str) -> None:
    why = check_first_line(line)
    assert why is not None and refusal in why


@pytest.mark.parametrize(
    "line",
    [
        b'{"op":"attach","id":"web:0123abcd"}\n',
        b'{"op":"attach","id":"web:0123abcd","over_link":false}\n',
    ],
)
def test_an_attach_is_marked_over_the_link_whatever_the_laptop_said(line: bytes) -> None:
    assert json.loads(mark_attach(line)) == {
        "op": "attach", "id": "web:0123abcd", "over_link": True,
    }  # fmt: skip


def test_other_ops_pass_unchanged() -> None:
    line = b'{"op":"list","over_link":true}\n'
    assert mark_attach(line) == line


@pytest.fixture
def far_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> nacl.signing.SigningKey:
    """This (far) machine's config and state dirs (its journal), with a laptop's owner key
    in its owners file."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    laptop = nacl.signing.SigningKey.generate()
    keys.trust_owner(keys.public_hex(laptop), "laptop")
    return laptop


@pytest.mark.parametrize("op", sorted(ANSWER_KINDS))
def test_a_deny_or_revoke_crosses_signed_by_a_trusted_owner_key(
    far_keys: nacl.signing.SigningKey, op: str
) -> None:
    now = time.time()
    for key in (far_keys, keys.owner_key()):
        signed = approval.sign_answer(key, op, "web:0123abcd", now)
        line = json.dumps({"op": op, "id": "web:0123abcd", "signed": signed}).encode()
        assert check_first_line(line) is None and answer_refusal(line, now) is None


@pytest.mark.parametrize("op", sorted(ANSWER_KINDS))
def test_an_unsigned_or_strangers_deny_or_revoke_is_refused(
    far_keys: nacl.signing.SigningKey, op: str
) -> None:
    now = time.time()
    stranger = approval.sign_answer(nacl.signing.SigningKey.generate(), op, "web:0123abcd", now)
    for extra in ({}, {"signed": stranger}):
        line = json.dumps({"op": op, "id": "web:0123abcd", **extra}).encode()
        refusal = answer_refusal(line, now)
        assert refusal is not None and refusal[0] == "bad_signature", refusal


def test_other_ops_need_no_signature(far_keys: nacl.signing.SigningKey) -> None:
    assert answer_refusal(b'{"op":"list"}', time.time()) is None


def _answer_line(key: nacl.signing.SigningKey, op: str, request_id: str, now: float) -> bytes:
    signed = approval.sign_answer(key, op, request_id, now)
    return json.dumps({"op": op, "id": request_id, "signed": signed}).encode()


@pytest.mark.parametrize("op", sorted(ANSWER_KINDS))
def test_a_signed_deny_or_revoke_crosses_once(far_keys: nacl.signing.SigningKey, op: str) -> None:
    # A copy of the owner's signed answer, sent again within its 5 minutes (by whoever
    # saw it cross), is refused by its nonce, as a used approval is; a new one passes.
    now = time.time()
    line = _answer_line(far_keys, op, "web:0123abcd", now)
    assert answer_refusal(line, now) is None
    refusal = answer_refusal(line, now + 1)
    assert refusal == ("used", f"this signed {op} was already taken; a copy of it is refused")
    assert answer_refusal(_answer_line(far_keys, op, "web:0123abcd", now), now + 1) is None
    taken = [r for r in ReservationJournal().ring.records() if r.get("state") == ANSWERED]
    assert [(r["kind"], r["request"]) for r in taken] == [(op, "web:0123abcd")] * 2
    assert all(r["expires"] == now + MAX_CLOCK_SKEW for r in taken)


def test_signed_answers_past_the_journals_bound_are_refused_not_forgotten(
    far_keys: nacl.signing.SigningKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A journal (of 3 slots here, 256 in use) full of documents still valid refuses a new
    # answer, and every answer it holds still refuses its copy: none was forgotten.
    monkeypatch.setattr(far_terminals, "ReservationJournal", partial(ReservationJournal, slots=3))
    now = time.time()
    lines = [_answer_line(far_keys, "deny", f"web:{n:08x}", now) for n in range(4)]
    assert [answer_refusal(line, now) for line in lines[:3]] == [None] * 3
    full = answer_refusal(lines[3], now)
    assert full is not None and full[0] == "journal_full", full
    assert "3 approvals and signed answers are still valid" in full[1]
    assert [answer_refusal(line, now + 1) for line in lines[:3]] == [
        ("used", "this signed deny was already taken; a copy of it is refused")
    ] * 3
    # Once the oldest has expired, its slot is taken again.
    later = now + MAX_CLOCK_SKEW + 1
    assert answer_refusal(_answer_line(far_keys, "deny", "web:0000000a", later), later) is None
