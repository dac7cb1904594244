"""Property-based tests: the base-path rule and header hygiene hold for any input."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sandbridge.protocol.http.base_path import apply_base_path
from sandbridge.protocol.http.forwarding import (
    FORWARDING_FIELDS,
    HOP_BY_HOP,
    build_upstream_request,
)
from sandbridge.protocol.http.origin_policy import AppOrigin
from sandbridge.protocol.http.parser import MESSAGE_END, RequestHead, RequestReader

SEGMENT = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._~", min_size=1, max_size=8
).filter(lambda s: s not in (".", ".."))
BASE = st.lists(SEGMENT, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts))
TARGET = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789/-._~?=&%", max_size=40).map(
    lambda rest: "/" + rest
)
TOKEN = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyz-ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=12
)
VALUE = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=20)


@given(TARGET, BASE)
def test_base_path_rule_is_idempotent(target: str, base: str) -> None:
    once = apply_base_path(target, base)
    assert apply_base_path(once, base) == once


@given(TARGET, BASE)
def test_result_always_lies_under_the_base(target: str, base: str) -> None:
    result = apply_base_path(target, base)
    assert result == base or result.startswith((base + "/", base + "?"))


@given(TARGET)
def test_root_base_changes_nothing(target: str) -> None:
    assert apply_base_path(target, "/") == target


@given(TARGET, BASE)
def test_paths_already_under_the_base_are_untouched(target: str, base: str) -> None:
    under = base + target
    assert apply_base_path(under, base) == under


def _parse(raw: bytes) -> RequestHead:
    events = RequestReader().feed(raw)
    assert isinstance(events[0], RequestHead) and events[-1] is MESSAGE_END
    return events[0]


@given(
    st.lists(st.tuples(TOKEN, VALUE), max_size=12),
    st.lists(
        st.sampled_from(sorted(n.decode() for n in HOP_BY_HOP | FORWARDING_FIELDS)), max_size=6
    ),
    st.lists(TOKEN, max_size=3),
)
def test_forwarded_head_has_no_hop_by_hop_or_foreign_forwarding_fields(
    headers: list[tuple[str, str]], hostile: list[str], connection_named: list[str]
) -> None:
    lines = [f"{name}: {value}" for name, value in headers]
    lines += [
        f"{name}: x"
        for name in hostile
        if name.lower() not in ("transfer-encoding", "upgrade", "connection")
    ]
    lines += [f"{name}: named" for name in connection_named]
    if connection_named:
        lines.append("Connection: " + ", ".join(connection_named))
    raw = (
        "GET /p HTTP/1.1\r\nHost: 127.0.0.1:5000\r\n"
        + "".join(line + "\r\n" for line in lines)
        + "\r\n"
    )
    head = _parse(raw.encode())
    request = build_upstream_request(
        head, base_path="/", origin=AppOrigin(5000), client_host="127.0.0.1"
    )
    forwarded = _parse(request.head)
    names = [name.lower() for name, _ in forwarded.headers]
    dropped = HOP_BY_HOP | {n.lower().encode() for n in connection_named}
    assert not dropped.intersection(names)
    assert names.count(b"host") == 1
    for field in FORWARDING_FIELDS - {
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
    }:
        assert field not in names
    assert [v for n, v in forwarded.headers if n.lower() == b"x-forwarded-for"] == [b"127.0.0.1"]
    kept = [
        (n.encode(), v.encode())
        for n, v in headers
        if n.lower().encode() not in dropped | FORWARDING_FIELDS | {b"host", b"content-length"}
    ]
    assert [h for h in forwarded.headers if (h[0], h[1]) in kept] == [
        h for h in head.headers if (h[0], h[1]) in kept
    ]
