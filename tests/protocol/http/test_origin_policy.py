"""Host and Origin rules, table by table."""

from __future__ import annotations

import re

import pytest

from sandbridge.exceptions import HttpError
from sandbridge.protocol.http.origin_policy import (
    AppOrigin,
    UrlForm,
    check_host,
    check_origin,
    origins_of,
)

SESSION = origins_of([5000, 6000])


@pytest.mark.parametrize(
    ("method", "upgrade", "origin"),
    [
        (b"GET", False, b"http://evil.example"),
        (b"HEAD", False, b"null"),
        (b"OPTIONS", False, b"http://evil.example"),
        (b"POST", False, None),
        (b"POST", False, b"http://127.0.0.1:5000"),
        (b"DELETE", False, b"http://localhost:6000"),
        (b"GET", True, b"http://[::1]:5000"),
        (b"PUT", False, b"HTTP://LOCALHOST:5000/"),
    ],
)
def test_allowed_requests(method: bytes, upgrade: bool, origin: bytes | None) -> None:
    headers = [] if origin is None else [(b"Origin", origin)]
    check_origin(headers, method, upgrade, SESSION)


@pytest.mark.parametrize(
    ("method", "upgrade", "origin"),
    [
        (b"POST", False, b"http://evil.example"),
        (b"POST", False, b"null"),
        (b"GET", True, b"http://evil.example"),
        (b"GET", True, b"null"),
        (b"PATCH", False, b"http://127.0.0.1:7000"),
        (b"POST", False, b"https://127.0.0.1:5000"),
    ],
)
def test_refused_requests_are_403(method: bytes, upgrade: bool, origin: bytes) -> None:
    with pytest.raises(HttpError) as refused:
        check_origin([(b"Origin", origin)], method, upgrade, SESSION)
    assert refused.value.status == 403


def test_two_origin_headers_are_400() -> None:
    with pytest.raises(HttpError) as refused:
        check_origin([(b"Origin", b"a"), (b"Origin", b"b")], b"POST", False, SESSION)
    assert refused.value.status == 400


@pytest.mark.parametrize(
    ("host", "status"),
    [
        (b"evil.example:5000", 421),
        (b"127.0.0.1:5001", 421),
        (b"127.1:5000", 421),
        (b"a b", 400),
        (b"127.0.0.1:5000/x", 400),
        (b"user@127.0.0.1:5000", 400),
        (b"127.0.0.1:123456", 400),
    ],
)
def test_host_refusals(host: bytes, status: int) -> None:
    with pytest.raises(HttpError) as refused:
        check_host([(b"Host", host)], AppOrigin(5000))
    assert refused.value.status == status


@pytest.mark.parametrize("host", [b"127.0.0.1:5000", b"LocalHost:5000", b"[::1]:5000"])
def test_host_accepted(host: bytes) -> None:
    assert check_host([(b"Host", host)], AppOrigin(5000)) == host


# The default form: each app is its own <label>.localhost, and nothing else names it.
NAMED = AppOrigin(5000, "abcdefghijklmnopqrstuvwxyz")


def test_new_origin_has_a_fresh_unguessable_dns_label() -> None:
    first, second = AppOrigin.new(5000), AppOrigin.new(5000)
    assert first.label is not None and second.label is not None
    assert first.label != second.label
    assert re.fullmatch(r"[a-z2-7]{26}", first.label)  # 128 bits of lowercase base32
    assert first.url("/app") == f"http://{first.label}.localhost:5000/app"


def test_ip_form_origin_is_the_contract_url() -> None:
    origin = AppOrigin.new(5000, UrlForm.IP)
    assert origin.label is None
    assert origin.url("/") == "http://127.0.0.1:5000/"


@pytest.mark.parametrize(
    "host",
    [b"abcdefghijklmnopqrstuvwxyz.localhost:5000", b"ABCDEFGHIJKLMNOPQRSTUVWXYZ.LocalHost:5000"],
)
def test_named_app_accepts_its_own_name_in_any_case(host: bytes) -> None:
    assert check_host([(b"Host", host)], NAMED) == host


@pytest.mark.parametrize(
    "host",
    [
        b"127.0.0.1:5000",
        b"localhost:5000",
        b"[::1]:5000",
        b"other.localhost:5000",
        b"abcdefghijklmnopqrstuvwxyz.localhost:5001",
        b"abcdefghijklmnopqrstuvwxyz.localhost",
        b"x.abcdefghijklmnopqrstuvwxyz.localhost:5000",
        b"abcdefghijklmnopqrstuvwxyz.localhost.:5000",
        b"abcdefghijklmnopqrstuvwxyz.example:5000",
    ],
)
def test_named_app_refuses_every_other_host_without_naming_its_label(host: bytes) -> None:
    with pytest.raises(HttpError) as refused:
        check_host([(b"Host", host)], NAMED)
    assert refused.value.status == 421
    message = str(refused.value).lower()
    offered = host.decode().lower()
    assert "abcdefghijklmnopqrstuvwxyz" not in message.replace(offered, "")


def test_named_session_origins_are_the_label_origins_only() -> None:
    other = AppOrigin(6000, "zyxwvutsrqponmlkjihgfedcba")
    session = NAMED.origins | other.origins
    check_origin(
        [(b"Origin", b"http://zyxwvutsrqponmlkjihgfedcba.localhost:6000")], b"POST", False, session
    )
    for origin in (b"http://127.0.0.1:5000", b"http://localhost:6000", b"http://x.localhost:5000"):
        with pytest.raises(HttpError) as refused:
            check_origin([(b"Origin", origin)], b"POST", False, session)
        assert refused.value.status == 403
