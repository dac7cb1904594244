"""The one-time token and the per-port cookie of private apps."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import HttpError
from sandbridge.http.private_access import AccessGate, Redirect, strip_relay_cookies


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
