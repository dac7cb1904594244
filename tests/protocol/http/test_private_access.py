"""The one-time token and the per-port cookie of private apps."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import HttpError
from sandbridge.protocol.http.private_access import (
    AccessGate,
    Redirect,
    is_relay_set_cookie,
    strip_relay_cookies,
)


def test_token_is_exchanged_once() -> None:
    gate = AccessGate(5000)
    first = gate.check(f"/page?a=1&sandbridge_token={gate.token}&b=2".encode(), [])
    assert isinstance(first, Redirect)
    assert first.location == b"/page?a=1&b=2"
    assert first.set_cookie.startswith(b"sandbridge_5000=" + gate.secret + b";")
    with pytest.raises(HttpError, match="already used"):
        gate.check(f"/?sandbridge_token={gate.token}".encode(), [])


def test_cookie_admits_and_everything_else_is_403() -> None:
    gate = AccessGate(5000)
    assert gate.check(b"/", [(b"Cookie", b"x=1; sandbridge_5000=" + gate.secret)]) is None
    for cookie in (b"", b"sandbridge_5000=wrong", b"sandbridge_5001=" + gate.secret):
        with pytest.raises(HttpError) as refused:
            gate.check(b"/", [(b"Cookie", cookie)])
        assert refused.value.status == 403


@pytest.mark.parametrize("token", [b"%C3%A9", b"%FF", b"\xc3\xa9", b"%00"], ids=repr)
def test_a_token_that_is_not_ascii_is_a_wrong_token(token: bytes) -> None:
    """(``hmac.compare_digest`` raised ``TypeError`` on a non-ASCII ``str``.)"""
    gate = AccessGate(5000)
    with pytest.raises(HttpError) as refused:
        gate.check(b"/?sandbridge_token=" + token, [])
    assert refused.value.status == 403
    encoded = gate.token.replace("-", "%2D").encode()  # the real one, percent-encoded, works
    assert isinstance(gate.check(b"/?sandbridge_token=" + encoded, []), Redirect)


def test_wrong_token_is_403() -> None:
    with pytest.raises(HttpError) as refused:
        AccessGate(5000).check(b"/?sandbridge_token=nope", [])
    assert refused.value.status == 403


def test_relay_cookies_of_every_app_are_stripped() -> None:
    headers = [
        (b"Cookie", b"a=1; sandbridge_5000=s; b=2"),
        (b"Cookie", b"sandbridge_6000=t"),
        (b"X", b"y"),
    ]
    assert strip_relay_cookies(headers) == [(b"Cookie", b"a=1; b=2"), (b"X", b"y")]


def test_tokens_and_secrets_are_unguessable() -> None:
    first, second = AccessGate(1), AccessGate(1)
    assert first.token != second.token and first.secret != second.secret
    assert len(first.token) >= 43


@pytest.mark.parametrize(
    "value",
    [
        b"sandbridge_5000=x; Path=/",
        b"SANDBRIDGE_5000=x",
        b"Sandbridge_anything=x; Max-Age=0",
        b" \tsandbridge_5000 =x",
        b"=sandbridge_5000=x",
        b" = sandbridge_5000=x",
        b"sandbridge_5000",
    ],
)
def test_set_cookie_of_a_relay_cookie_is_recognised_however_spelled(value: bytes) -> None:
    assert is_relay_set_cookie(value)


@pytest.mark.parametrize("value", [b"session=1", b"x=sandbridge_5000", b"my_sandbridge_1=x"])
def test_set_cookie_of_an_app_cookie_is_the_apps(value: bytes) -> None:
    assert not is_relay_set_cookie(value)


def test_a_second_cookie_of_the_same_name_does_not_lock_the_owner_out() -> None:
    gate = AccessGate(5000)
    cookie = b"sandbridge_5000=planted; sandbridge_5000=" + gate.secret
    assert gate.check(b"/", [(b"Cookie", cookie)]) is None


def test_the_cookie_is_host_only_httponly_and_strict() -> None:
    gate = AccessGate(5000)
    redirect = gate.check(f"/?sandbridge_token={gate.token}".encode(), [])
    assert isinstance(redirect, Redirect)
    attributes = [part.strip().lower() for part in redirect.set_cookie.split(b";")[1:]]
    assert b"httponly" in attributes and b"samesite=strict" in attributes
    assert not any(attribute.startswith(b"domain") for attribute in attributes)


def test_relay_cookies_are_stripped_from_requests_in_any_case() -> None:
    assert strip_relay_cookies([(b"Cookie", b"SANDBRIDGE_1=s; a=1")]) == [(b"Cookie", b"a=1")]
