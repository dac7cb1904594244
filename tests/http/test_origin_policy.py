"""Host and Origin rules, table by table."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import HttpError
from sandbridge.http.origin_policy import check_host, check_origin, origins_of

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
        check_host([(b"Host", host)], 5000)
    assert refused.value.status == status


@pytest.mark.parametrize("host", [b"127.0.0.1:5000", b"LocalHost:5000", b"[::1]:5000"])
def test_host_accepted(host: bytes) -> None:
    assert check_host([(b"Host", host)], 5000) == host
