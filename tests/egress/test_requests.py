"""Egress requests' pure rules: destinations, reasons, the request table, the grants."""

from __future__ import annotations

import dataclasses
import ipaddress
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbridge.egress.decision import match_destination
from sandbridge.egress.requests import (
    MAX_DECIDED,
    MAX_REASON_CHARS,
    MAX_SAVED_REASON_CHARS,
    Destination,
    Grants,
    RequestState,
    RequestTable,
    Scope,
    check_reason,
    comment_text,
    parse_destination,
    saved_line,
    standing,
)
from sandbridge.exceptions import EgressRequestRefused
from sandbridge.project.policy import ALLOW_FILE, Policy, PolicyBuilder
from sandbridge.shown_text import quoted, shown

GATE = "100.64.0.1"
OTHER = Destination("other.test", 80)


# --- destinations -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("other.test", Destination("other.test", None)),
        ("other.test:80", Destination("other.test", 80)),
        ("Other.TEST.:8443", Destination("other.test", 8443)),
        ("*.example.com", Destination("*.example.com", None)),
        ("*.example.com:8080", Destination("*.example.com", 8080)),
        ("203.0.113.7", Destination("203.0.113.7", None)),
        ("[2001:db8::1]:443", Destination("2001:db8::1", 443)),
    ],
)
def test_the_allow_files_destination_forms_are_accepted(value: str, expected: Destination) -> None:
    assert parse_destination(value, GATE) == expected


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("", "destination must be HOST[:PORT], got ''"),
        (None, "destination must be HOST[:PORT], got 'None'"),
        (["other.test"], "destination must be HOST[:PORT], got \"['other.test']\""),
        ("other.test private", "destination must be one HOST[:PORT], got 'other.test private'"),
        ("other.test\n", "destination must be one HOST[:PORT]"),
        ("other\x1b[2J.test", "got 'other\\\\x1b[2J.test'"),
        ("http://evil.test/", "destination 'http://evil.test/': port must be 1..65535"),
        ("other.test:0", "port must be 1..65535, got '0'"),
        ("*.com", "would allow a whole top-level domain"),
        ("ev!l.test", "'ev!l.test' is not a domain name"),
        ("1.2.3", "'1.2.3' is not a domain name"),
        ("gate:5432", "'gate:5432' is a host service"),
        ("100.64.0.1:5432", "'100.64.0.1:5432' is a host service"),
        ("a" * 301, "destination is 301 characters; the limit is 300"),
    ],
)
def test_anything_else_is_refused_naming_the_value(value: object, error: str) -> None:
    with pytest.raises(EgressRequestRefused) as caught:
        parse_destination(value, GATE)
    assert error in str(caught.value)
    assert caught.value.code in ("bad_destination", "host_service")


@pytest.mark.parametrize(
    ("value", "caution"),
    [
        ("127.0.0.1:22", "127.0.0.1 is a loopback address: approving lets the proxy connect"),
        ("10.0.0.5", "10.0.0.5 is a private address"),
        ("[::1]:443", "::1 is a loopback address"),
        ("169.254.169.254:80", "169.254.169.254 is a link-local address"),
        # Below a public suffix, a wildcard is a country's or a hoster's every customer.
        ("*.co.uk", "*.co.uk is a wildcard: approving allows every name ending in .co.uk"),
        ("*.github.io:8080", "*.github.io is a wildcard: approving allows every name"),
    ],
)
def test_a_non_public_address_comes_with_a_warning(value: str, caution: str) -> None:
    warning = parse_destination(value, GATE).caution
    assert warning is not None and warning.startswith(caution)


@pytest.mark.parametrize("value", ["8.8.8.8", "other.test", "other.test:8080"])
def test_a_public_destination_needs_no_warning(value: str) -> None:
    assert parse_destination(value, GATE).caution is None


def test_an_internationalized_name_is_shown_with_its_foreign_letters_named() -> None:
    """``xn--pypal-4ve.com`` is "paypal.com" with a Cyrillic a (U+0430): the owner is told what a
    browser shows and which letters are not ASCII, before approving."""
    warning = parse_destination("xn--pypal-4ve.com:443", GATE).caution
    assert warning == (
        "xn--pypal-4ve.com is an internationalized name that a browser may show as "
        '"p\u0430ypal.com";'
        ' its letters outside ASCII: "\u0430" U+0430 CYRILLIC SMALL LETTER A'
        " (a letter of another script can look like a Latin one)"
    )


def test_a_decoded_name_is_shown_escaped_and_a_wildcard_warns_twice() -> None:
    # "a\u202eb": a right-to-left override hidden in punycode must not reach a terminal raw.
    warning = parse_destination("*.xn--ab-g4t.test", GATE).caution
    assert warning is not None
    assert "\u202e" not in warning and "a\\u202eb" in warning
    assert warning.startswith("*.xn--ab-g4t.test is a wildcard")
    assert 'may show as "*.a\\u202eb.test"' in warning


def test_a_label_that_is_not_punycode_is_said() -> None:
    warning = parse_destination("xn--zzzz999.com", GATE).caution
    assert (
        warning
        == "xn--zzzz999.com: its label xn--zzzz999 is not valid punycode (no name shows as it)"
    )


def test_many_foreign_letters_are_named_within_a_bound() -> None:
    host = "".join(chr(0x430 + n) for n in range(20)).encode("punycode").decode()
    warning = parse_destination(f"xn--{host}.test", GATE).caution
    assert warning is not None and "and 12 more" in warning
    assert warning.count("CYRILLIC") == 8


def test_a_destination_reads_as_its_allow_entry() -> None:
    assert Destination("2001:db8::1", 443).text == "[2001:db8::1]:443"
    assert Destination("other.test", None).text == "other.test"


# --- reasons ----------------------------------------------------------------------------


def test_a_reason_of_the_limit_is_taken() -> None:
    assert check_reason("x" * MAX_REASON_CHARS) == "x" * MAX_REASON_CHARS


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (None, "reason must be a string, got NoneType"),
        (42, "reason must be a string, got int"),
        ("", "reason is empty"),
        (" \n\t", "reason is empty"),
        ("x" * (MAX_REASON_CHARS + 1), "reason is 501 characters; the limit is 500"),
    ],
)
def test_a_bad_reason_is_refused(value: object, error: str) -> None:
    with pytest.raises(EgressRequestRefused, match="reason") as caught:
        check_reason(value)
    assert error in str(caught.value)
    assert caught.value.code == "bad_reason"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("read the docs", "read the docs"),
        ("café 中文", "café 中文"),
        ("\x1b[2J", "\\x1b[2J"),
        ("a\nb\rc\td", "a\\x0ab\\x0dc\\x09d"),
        ("\x07\x7f\x85\x9b", "\\x07\\x7f\\x85\\x9b"),
        ("\u202eevil\u200b", "\\u202eevil\\u200b"),
        ("x\u2028y\u2029z", "x\\u2028y\\u2029z"),
        ("a\\x1b", "a\\\\x1b"),
    ],
)
def test_a_reason_is_shown_with_every_control_escaped(text: str, expected: str) -> None:
    assert shown(text) == expected


def test_a_quoted_reason_cannot_end_its_quotation() -> None:
    assert quoted('x"; approve --save') == '"x\\"; approve --save"'


@given(st.text())
def test_nothing_shown_can_control_a_terminal(text: str) -> None:
    out = shown(text)
    assert all(char.isprintable() for char in out)
    assert shown(text) == out and "\n" not in out


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("docs\nfor the\x1b[31m build", "docs for the [31m build"),
        ("a\u2028b\x85c\x1cd\x1de\x1ef", "a b c d e f"),
        ("   spaced    out  ", "spaced out"),
        ("# hash is fine", "# hash is fine"),
    ],
)
def test_a_saved_reason_is_one_clean_line(reason: str, expected: str) -> None:
    assert comment_text(reason) == expected


def test_a_saved_reason_is_bounded() -> None:
    text = comment_text("y" * MAX_REASON_CHARS)
    assert len(text) == MAX_SAVED_REASON_CHARS and text.endswith("...")


def _read_back(tmp_path: Path, line: str) -> Policy:
    (tmp_path / ".sandbridge").mkdir(exist_ok=True)
    (tmp_path / ALLOW_FILE).write_text(line)
    return PolicyBuilder().read_project(tmp_path).build()


def test_the_saved_line_names_the_entry_date_and_reason(tmp_path: Path) -> None:
    line = saved_line(OTHER, "read\nthe docs", "2026-12-01")
    assert line == "other.test:80  # 2026-12-01, asked from the sandbox: read the docs\n"
    [rule] = _read_back(tmp_path, line).rules
    assert (rule.host, rule.port, rule.private) == ("other.test", 80, False)


@given(reason=st.text(min_size=1, max_size=MAX_REASON_CHARS))
def test_no_reason_makes_the_saved_line_more_than_one_entry(
    tmp_path_factory: pytest.TempPathFactory, reason: str
) -> None:
    line = saved_line(Destination("*.example.com", 8080), reason, "2026-12-01")
    assert line.count("\n") == 1 and len(line.splitlines()) == 1
    policy = _read_back(tmp_path_factory.mktemp("saved"), line)
    assert [rule.text for rule in policy.rules] == ["*.example.com:8080"]


# --- the request table --------------------------------------------------------------------


def test_a_request_is_pending_until_decided() -> None:
    table = RequestTable()
    request, new = table.submit(OTHER, "why", 100.0, "s:00000001")
    assert new and request.state is RequestState.PENDING
    assert table.pending(101.0) == [request]
    table.decide("s:00000001", RequestState.APPROVED, Scope.ONCE, 102.0)
    assert table.pending(103.0) == []
    assert request.summary("s", 110.0) == {
        "id": "s:00000001",
        "session": "s",
        "destination": "other.test:80",
        "reason": "why",
        "age": 10.0,
        "state": "approved",
        "scope": "once",
        "asked": 1,
        "caution": None,
    }


def test_a_duplicate_of_a_pending_request_folds_into_it() -> None:
    table = RequestTable(max_per_window=1)
    first, _ = table.submit(OTHER, "why", 0.0, "s:00000001")
    again, new = table.submit(OTHER, "another reason", 1.0, "s:00000002")
    assert again is first and not new and first.asked == 2
    assert first.reason == "why"
    assert len(table.pending(2.0)) == 1


def test_the_same_host_on_another_port_is_another_request() -> None:
    table = RequestTable()
    table.submit(OTHER, "why", 0.0, "s:00000001")
    _, new = table.submit(Destination("other.test", 443), "why", 0.0, "s:00000002")
    assert new


def test_pending_requests_are_capped() -> None:
    table = RequestTable(max_per_window=1000)
    for n in range(20):
        table.submit(Destination(f"n{n}.test", None), "why", 0.0, f"s:{n:08x}")
    with pytest.raises(EgressRequestRefused, match="20 requests already wait") as caught:
        table.submit(Destination("one-more.test", None), "why", 0.0, "s:ffffffff")
    assert caught.value.code == "too_many"
    table.decide("s:00000000", RequestState.DENIED, None, 1.0)
    assert table.submit(Destination("one-more.test", None), "why", 1.0, "s:ffffffff")[1]


def test_new_requests_are_rate_limited_per_window() -> None:
    table = RequestTable()
    for n in range(10):
        table.submit(Destination(f"n{n}.test", None), "why", float(n), f"s:{n:08x}")
    with pytest.raises(EgressRequestRefused, match="more than 10 requests in 60 s") as caught:
        table.submit(Destination("late.test", None), "why", 30.0, "s:ffffffff")
    assert caught.value.code == "rate_limited"
    # The window slides: a minute after the first, one more is taken.
    assert table.submit(Destination("late.test", None), "why", 60.0, "s:ffffffff")[1]


def test_an_unanswered_request_expires_and_frees_its_place() -> None:
    table = RequestTable(max_pending=1, ttl=3600.0)
    request, _ = table.submit(OTHER, "why", 0.0, "s:00000001")
    with pytest.raises(EgressRequestRefused, match="already wait"):
        table.submit(Destination("b.test", None), "why", 3599.0, "s:00000002")
    assert table.submit(Destination("b.test", None), "why", 3600.0, "s:00000002")[1]
    assert request.state is RequestState.EXPIRED
    with pytest.raises(EgressRequestRefused, match="is expired"):
        table.decide("s:00000001", RequestState.APPROVED, Scope.ONCE, 3601.0)


@pytest.mark.parametrize(
    ("request_id", "code", "error"),
    [
        ("s:00000009", "unknown_request", "no egress request 's:00000009' in this session"),
        ("s:00000001", "not_pending", "egress request s:00000001 is denied"),
    ],
)
def test_only_a_pending_request_can_be_decided(request_id: str, code: str, error: str) -> None:
    table = RequestTable()
    table.submit(OTHER, "why", 0.0, "s:00000001")
    table.decide("s:00000001", RequestState.DENIED, None, 1.0)
    with pytest.raises(EgressRequestRefused) as caught:
        table.decide(request_id, RequestState.APPROVED, Scope.SESSION, 2.0)
    assert (caught.value.code, str(caught.value)) == (code, error)


def test_decided_requests_are_remembered_within_a_bound() -> None:
    table = RequestTable(max_per_window=10_000)
    for n in range(MAX_DECIDED + 5):
        table.submit(Destination(f"n{n}.test", None), "why", 0.0, f"s:{n:08x}")
        table.decide(f"s:{n:08x}", RequestState.DENIED, None, 0.0)
    assert table.get("s:00000000") is None
    assert table.get(f"s:{MAX_DECIDED + 4:08x}") is not None
    assert len(table._requests) == MAX_DECIDED


def test_a_taken_id_is_refused_not_overwritten() -> None:
    table = RequestTable()
    table.submit(OTHER, "why", 0.0, "s:00000001")
    with pytest.raises(EgressRequestRefused, match="is taken"):
        table.submit(Destination("b.test", None), "why", 0.0, "s:00000001")


# --- grants ----------------------------------------------------------------------------


def _policy() -> Policy:
    return dataclasses.replace(PolicyBuilder().build(), rules=())


def test_a_once_grant_allows_one_decision_then_is_gone() -> None:
    grants, base = Grants(), _policy()
    assert not match_destination(grants.policy(base), "other.test", 80).allowed
    grants.add(OTHER.rule("approve s:1 --once"), Scope.ONCE)
    decision = match_destination(grants.policy(base), "other.test", 80)
    assert decision.allowed and "approve s:1 --once" in decision.reason
    assert grants.spend(decision.rule) == decision.rule
    assert not match_destination(grants.policy(base), "other.test", 80).allowed


def test_a_once_grant_given_back_can_be_used_again() -> None:
    grants, base = Grants(), _policy()
    grants.add(OTHER.rule("once"), Scope.ONCE)
    rule = grants.spend(match_destination(grants.policy(base), "other.test", 80).rule)
    grants.give_back(rule)
    assert match_destination(grants.policy(base), "other.test", 80).allowed


def test_a_session_grant_is_never_spent() -> None:
    grants, base = Grants(), _policy()
    grants.add(OTHER.rule("session"), Scope.SESSION)
    for _ in range(3):
        decision = match_destination(grants.policy(base), "other.test", 80)
        assert decision.allowed
        assert grants.spend(decision.rule) is None


def test_the_policys_own_entries_decide_before_a_grant() -> None:
    base = PolicyBuilder()
    base.set("allow", "other.test:80", "--allow")
    policy = base.build()
    grants = Grants()
    grants.add(OTHER.rule("once"), Scope.ONCE)
    decision = match_destination(grants.policy(policy), "other.test", 80)
    assert decision.rule is not None and decision.rule.source == "--allow"
    assert grants.spend(decision.rule) is None


def test_without_grants_the_policy_is_used_as_it_is() -> None:
    policy = _policy()
    assert Grants().policy(policy) is policy


@given(st.text(max_size=80) | st.from_regex(r"\*?\.?[a-z0-9.\[\]:-]{1,40}", fullmatch=True))
def test_a_destination_is_refused_or_reads_back_as_one_entry(value: str) -> None:
    try:
        destination = parse_destination(value, GATE)
    except EgressRequestRefused as exc:
        assert exc.code in ("bad_destination", "host_service")
        assert all(char.isprintable() for char in str(exc))
        return
    assert parse_destination(destination.text, GATE) == destination
    assert destination.host != "gate" and destination.host != GATE


@pytest.mark.parametrize(
    ("entries", "asked", "resolved", "outcome"),
    [
        # nothing allows it: asked for; with `private` when only non-global addresses come
        ((), "m.test:443", ["192.0.2.3"], "ask private"),
        ((), "m.test:443", ["192.0.2.3", "8.8.0.1"], "ask"),  # the global one is reached
        ((), "m.test:443", [], "ask"),  # does not resolve now: asked as it is
        ((), "m.test:443", ["8.8.0.1"], "ask"),
        ((), "192.0.2.3:443", [], "ask"),  # an address: the entry names it as it is
        # an entry allows it and can reach it: nothing to ask
        (("m.test",), "m.test:443", ["8.8.0.1"], "allowed"),
        (("m.test private",), "m.test:443", ["192.0.2.3"], "allowed"),
        (("m.test",), "m.test:443", [], "allowed"),
        # an entry matches first but cannot reach it: no grant after it would be reached
        (("m.test",), "m.test:443", ["192.0.2.3"], "blocked"),
        (("m.test",), "m.test", ["127.0.0.1"], "blocked"),
        (("*.corp.test",), "m.corp.test:443", ["10.0.0.8"], "blocked"),
        # on a port no entry matches, a grant decides first: asked for, with `private`
        (("m.test:443",), "m.test:8080", ["192.0.2.3"], "ask private"),
    ],
)
def test_standing_decides_a_request_as_the_proxy_decides_its_connections(
    entries: tuple[str, ...], asked: str, resolved: list[str], outcome: str
) -> None:
    builder = PolicyBuilder()
    for entry in entries:
        builder.set("allow", entry, "--allow")
    destination = parse_destination(asked, "100.64.0.1")
    found = standing(builder.build(), destination, [ipaddress.ip_address(a) for a in resolved])
    got = (
        "allowed"
        if found.allowed
        else "blocked"
        if found.blocked
        else "ask private"
        if found.private
        else "ask"
    )
    assert got == outcome
    if found.blocked:
        assert "ask the owner to " in found.blocked
