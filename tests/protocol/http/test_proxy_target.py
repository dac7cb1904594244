"""Proxy request targets: CONNECT authorities, absolute URLs, Host comparison."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import HttpError
from sandbridge.protocol.http.proxy_target import (
    MAX_REASON_CHARS,
    proxy_refusal,
    same_authority,
    split_absolute_url,
    split_authority,
)


@pytest.mark.parametrize(
    ("authority", "default", "expected"),
    [
        (b"example.com:443", None, ("example.com", 443)),
        (b"example.com", 80, ("example.com", 80)),
        (b"[2001:db8::1]:8443", None, ("[2001:db8::1]", 8443)),
        (b"[::1]", 80, ("[::1]", 80)),
        (b"1.2.3.4:80", None, ("1.2.3.4", 80)),
    ],
)
def test_authorities(authority: bytes, default: int | None, expected: tuple[str, int]) -> None:
    assert split_authority(authority, default) == expected


@pytest.mark.parametrize(
    ("authority", "fragment"),
    [
        (b"example.com", "needs a port"),
        (b"example.com:0", "bad port"),
        (b"example.com:99999", "bad port"),
        (b"example.com:http", "bad port"),
        (b"example.com:" + b"9" * 5000, "bad port"),
        (b"user@example.com:443", "bad host"),
        (b":443", "bad host"),
        (b"ex\xe4mple.com:443", "not ASCII"),
    ],
)
def test_bad_authorities_are_400(authority: bytes, fragment: str) -> None:
    with pytest.raises(HttpError, match=fragment) as caught:
        split_authority(authority, None)
    assert caught.value.status == 400


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (b"http://example.com/a?b", ("example.com", 80, b"/a?b")),
        (b"HTTP://Example.com:8080", ("Example.com", 8080, b"/")),
        (b"http://example.com?q", ("example.com", 80, b"/?q")),
    ],
)
def test_absolute_urls(target: bytes, expected: tuple[str, int, bytes]) -> None:
    assert split_absolute_url(target) == expected


@pytest.mark.parametrize(
    ("target", "fragment"),
    [
        (b"/relative", "needs an absolute http:// URL"),
        (b"https://example.com/", "through CONNECT"),
        (b"ftp://example.com/", "needs an absolute http:// URL"),
        (b"http://user:pw@example.com/", "user information"),
    ],
)
def test_bad_absolute_urls_are_400(target: bytes, fragment: str) -> None:
    with pytest.raises(HttpError, match=fragment):
        split_absolute_url(target)


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (("Example.com.", 80), ("example.com", 80), True),
        (("example.com", 80), ("example.com", 8080), False),
        (("example.com", 80), ("other.com", 80), False),
    ],
)
def test_same_authority(a: tuple[str, int], b: tuple[str, int], same: bool) -> None:
    assert same_authority(a, b) is same


def test_refusal_text_is_the_reason_phrase_and_the_body() -> None:
    response = proxy_refusal(403, "egress to x.org:443 refused: x.org is not in the allowlist")
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == (
        b"HTTP/1.1 403 egress to x.org:443 refused: x.org is not in the allowlist"
    )
    assert body == b"sandbridge: egress to x.org:443 refused: x.org is not in the allowlist\n"


def test_reason_phrase_is_bounded_printable_ascii() -> None:
    response = proxy_refusal(403, "bad\r\nInjected: 1 \u00e9" + "x" * 1000)
    status_line = response.split(b"\r\n")[0]
    assert status_line.startswith(b"HTTP/1.1 403 bad??Injected: 1 ?x")
    assert len(status_line) == len(b"HTTP/1.1 403 ") + MAX_REASON_CHARS
    assert b"Injected: 1" not in response.split(b"\r\n")[1]
