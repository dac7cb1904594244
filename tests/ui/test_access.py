"""The dashboard's access decision, one request head at a time (no sockets)."""

from __future__ import annotations

import pytest

from sandbridge.ui.access import (
    COOKIE_NAME,
    LOGIN_TOKEN_TTL,
    MAX_LOGIN_TOKENS,
    Access,
    Login,
    Refuse,
    Serve,
)

PORT = 41234


def _access() -> Access:
    return Access(port=PORT)


def _headers(access: Access, **fields: str) -> list[tuple[bytes, bytes]]:
    """A head from the dashboard's own page: its Host and cookie, plus ``fields``."""
    base = {"host": access.host, "cookie": f"{COOKIE_NAME}={access.cookie}"}
    base.update({name.replace("_", "-"): value for name, value in fields.items()})
    return [(name.encode(), value.encode()) for name, value in base.items() if value]


def _post(access: Access, **fields: str) -> list[tuple[bytes, bytes]]:
    own = {"origin": f"http://{access.host}", "x_sandbridge_csrf": access.csrf}
    return _headers(access, **{**own, **fields})


def test_the_login_token_sets_the_cookie_and_redirects_without_it() -> None:
    access = _access()
    token = access.login_url().partition("token=")[2]
    verdict = access.decide(b"GET", f"/?token={token}".encode(), _headers(access, cookie=""))
    assert verdict == Login("/", access.cookie_header())
    assert "HttpOnly" in access.cookie_header() and "SameSite=Strict" in access.cookie_header()


def test_the_login_token_works_once() -> None:
    access = _access()
    token = access.login_url().partition("token=")[2]
    target = f"/?token={token}".encode()
    assert isinstance(access.decide(b"GET", target, _headers(access, cookie="")), Login)
    again = access.decide(b"GET", target, _headers(access, cookie=""))
    assert isinstance(again, Refuse) and again.status == 403
    assert "already used" in again.reason


def test_each_login_url_has_its_own_token_and_each_works_once() -> None:
    access = _access()
    first, second = (access.login_url().partition("token=")[2] for _ in range(2))
    assert first != second
    for token in (second, first):
        target = f"/?token={token}".encode()
        assert isinstance(access.decide(b"GET", target, _headers(access, cookie="")), Login)
        again = access.decide(b"GET", target, _headers(access, cookie=""))
        assert isinstance(again, Refuse) and again.status == 403


def test_a_login_token_expires_unused() -> None:
    now = [1000.0]
    access = Access(port=PORT, clock=lambda: now[0])
    token = access.login_url().partition("token=")[2]
    now[0] += LOGIN_TOKEN_TTL
    verdict = access.decide(b"GET", f"/?token={token}".encode(), _headers(access, cookie=""))
    assert isinstance(verdict, Refuse) and verdict.status == 403
    assert "has expired" in verdict.reason
    assert access.login_tokens == {}


def test_unused_login_tokens_are_bounded_and_the_oldest_goes_first() -> None:
    access = _access()
    tokens = [access.login_url().partition("token=")[2] for _ in range(MAX_LOGIN_TOKENS + 1)]
    assert len(access.login_tokens) == MAX_LOGIN_TOKENS
    oldest = access.decide(b"GET", f"/?token={tokens[0]}".encode(), _headers(access, cookie=""))
    assert isinstance(oldest, Refuse)
    newest = access.decide(b"GET", f"/?token={tokens[-1]}".encode(), _headers(access, cookie=""))
    assert isinstance(newest, Login)


def test_a_wrong_login_token_is_refused_and_the_right_one_still_works() -> None:
    access = _access()
    wrong = access.decide(b"GET", b"/?token=guess", _headers(access, cookie=""))
    assert isinstance(wrong, Refuse) and wrong.status == 403
    token = access.login_url().partition("token=")[2]
    target = f"/?token={token}".encode()
    assert isinstance(access.decide(b"GET", target, _headers(access, cookie="")), Login)


@pytest.mark.parametrize(
    "cookie",
    ["", f"{COOKIE_NAME}=wrong", "other=1", f"x{COOKIE_NAME}=VALUE"],
    ids=["none", "wrong", "other-cookie", "lookalike-name"],
)
def test_a_request_without_the_cookie_is_refused(cookie: str) -> None:
    access = _access()
    verdict = access.decide(
        b"GET", b"/", _headers(access, cookie=cookie.replace("VALUE", access.cookie))
    )
    assert isinstance(verdict, Refuse) and verdict.status == 401


def test_the_cookie_among_others_is_found() -> None:
    access = _access()
    cookie = f"a=1; {COOKIE_NAME}={access.cookie}; b=2"
    assert access.decide(b"GET", b"/events", _headers(access, cookie=cookie)) == Serve(
        b"GET", "/events"
    )


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        f"evil.example:{PORT}",
        f"127.0.0.1:{PORT + 1}",
        "127.0.0.1",
        f"127.0.0.2:{PORT}",
        # Cookies ignore ports: a cookie of these names went to every listener on them.
        f"127.0.0.1:{PORT}",
        f"localhost:{PORT}",
        f"[::1]:{PORT}",
        f"LABEL.evil.localhost:{PORT}",
        f"other.localhost:{PORT}",
        "",
    ],
)
def test_a_host_that_is_not_the_dashboards_is_refused(host: str) -> None:
    access = _access()
    host = host.replace("LABEL", access.label)
    verdict = access.decide(b"GET", b"/", _headers(access, host=host))
    assert isinstance(verdict, Refuse) and verdict.status == 421
    if access.label not in host:  # a rebinding page reads the answer
        assert access.label not in verdict.reason


def test_the_dashboard_has_a_name_of_its_own_in_its_url() -> None:
    access, other = _access(), _access()
    assert access.label != other.label and len(access.label) == 26
    assert access.login_url().startswith(f"http://{access.label}.localhost:{PORT}/?token=")
    verdict = access.decide(b"GET", b"/", _headers(access, host=access.host.upper()))
    assert verdict == Serve(b"GET", "/")


def test_two_host_headers_are_refused() -> None:
    access = _access()
    headers = [*_headers(access), (b"host", b"evil.example")]
    verdict = access.decide(b"GET", b"/", headers)
    assert isinstance(verdict, Refuse) and verdict.status == 421


def test_a_post_from_the_page_is_served() -> None:
    access = _access()
    verdict = access.decide(b"POST", b"/api/action", _post(access, sec_fetch_site="same-origin"))
    assert verdict == Serve(b"POST", "/api/action")


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"origin": "http://evil.example"}, "Origin"),
        ({"origin": ""}, "Origin"),
        ({"origin": "null"}, "Origin"),
        ({"origin": f"http://127.0.0.1:{PORT + 1}"}, "Origin"),
        ({"origin": f"http://127.0.0.1:{PORT}"}, "Origin"),
        ({"sec_fetch_site": "cross-site"}, "Sec-Fetch-Site"),
        ({"sec_fetch_site": "same-site"}, "Sec-Fetch-Site"),
        ({"x_sandbridge_csrf": ""}, "CSRF"),
        ({"x_sandbridge_csrf": "guess"}, "CSRF"),
    ],
    ids=[
        "other-origin", "no-origin", "null-origin", "other-port", "ip-origin", "cross-site",
        "same-site", "no-csrf", "wrong-csrf",
    ],
)  # fmt: skip
def test_a_cross_site_post_is_refused(fields: dict[str, str], says: str) -> None:
    access = _access()
    verdict = access.decide(b"POST", b"/api/action", _post(access, **fields))
    assert isinstance(verdict, Refuse) and verdict.status == 403
    assert says in verdict.reason


@pytest.mark.parametrize("method", [b"HEAD", b"PUT", b"DELETE", b"PATCH", b"OPTIONS"])
def test_other_methods_are_refused(method: bytes) -> None:
    access = _access()
    verdict = access.decide(method, b"/api/action", _post(access))
    assert isinstance(verdict, Refuse) and verdict.status == 405


def test_a_login_attempt_by_post_does_not_spend_the_token() -> None:
    access = _access()
    token = access.login_url().partition("token=")[2]
    target = f"/?token={token}".encode()
    refused = access.decide(b"POST", target, _post(access, cookie=""))
    assert isinstance(refused, Refuse)
    assert isinstance(access.decide(b"GET", target, _headers(access, cookie="")), Login)
