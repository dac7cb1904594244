"""What the relay changes in requests and responses."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest

from sandbridge.exceptions import HttpError
from sandbridge.protocol.http.forwarding import (
    ConnectionHeads,
    Framing,
    UpstreamRequest,
    build_browser_response,
    build_upstream_request,
    end_to_end_fields,
    error_response,
)
from sandbridge.protocol.http.origin_policy import AppOrigin, origins_of
from sandbridge.protocol.http.parser import RequestHead, RequestReader, ResponseHead, ResponseReader


def _head(raw: bytes) -> RequestHead:
    event = RequestReader().feed(raw)[0]
    assert isinstance(event, RequestHead)
    return event


def _forward(raw: bytes, base: str = "/", port: int = 5000) -> bytes:
    return build_upstream_request(
        _head(raw), base_path=base, origin=AppOrigin(port), client_host="127.0.0.1"
    ).head


def test_request_target_gets_the_base_path() -> None:
    head = _forward(b"GET /styles.css HTTP/1.1\r\nHost: 127.0.0.1:5000\r\n\r\n", "/app")
    assert head.startswith(b"GET /app/styles.css HTTP/1.1\r\n")


@pytest.mark.parametrize("host", [b"127.0.0.1:5000", b"localhost:5000", b"[::1]:5000"])
def test_loopback_hosts_of_this_port_are_accepted(host: bytes) -> None:
    assert b"Host: " + host in _forward(b"GET / HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")


@pytest.mark.parametrize(
    ("host_lines", "status"),
    [
        (b"", 400),
        (b"Host: 127.0.0.1:5000\r\nHost: 127.0.0.1:5000\r\n", 400),
        (b"Host: evil.example:5000\r\n", 421),
        (b"Host: 127.0.0.1:5001\r\n", 421),
        (b"Host: 127.0.0.1\r\n", 421),
    ],
)
def test_foreign_or_missing_host_is_refused(host_lines: bytes, status: int) -> None:
    with pytest.raises(HttpError) as refused:
        _forward(b"GET / HTTP/1.1\r\n" + host_lines + b"\r\n")
    assert refused.value.status == status


def test_absolute_form_target_is_refused() -> None:
    with pytest.raises(HttpError) as refused:
        _forward(b"GET http://example.com/ HTTP/1.1\r\nHost: 127.0.0.1:5000\r\n\r\n")
    assert refused.value.status == 400


def test_hop_by_hop_and_connection_named_headers_are_dropped() -> None:
    head = _forward(
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1:5000\r\nConnection: keep-alive, X-Secret\r\n"
        b"X-Secret: 1\r\nKeep-Alive: 5\r\nTE: trailers\r\nProxy-Authorization: a\r\n"
        b"X-Kept: 2\r\n\r\n"
    ).lower()
    for dropped in (b"x-secret", b"keep-alive", b"\r\nte:", b"proxy-authorization", b"connection"):
        assert dropped not in head
    assert b"x-kept: 2" in head


def test_inbound_forwarding_headers_are_replaced() -> None:
    head = _forward(
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1:5000\r\nX-Forwarded-For: 6.6.6.6\r\n"
        b"Forwarded: for=6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\n\r\n"
    )
    assert b"6.6.6.6" not in head
    assert b"X-Forwarded-For: 127.0.0.1\r\n" in head
    assert b"X-Forwarded-Proto: http\r\n" in head


def test_upgrade_request_keeps_upgrade_headers() -> None:
    head = _forward(
        b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:5000\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Key: abc\r\n\r\n"
    )
    assert b"Connection: Upgrade\r\nUpgrade: websocket\r\n" in head
    assert b"Sec-WebSocket-Key: abc" in head


def test_chunked_request_stays_chunked() -> None:
    request = build_upstream_request(
        _head(b"POST / HTTP/1.1\r\nHost: 127.0.0.1:5000\r\nTransfer-Encoding: chunked\r\n\r\n"),
        base_path="/",
        origin=AppOrigin(5000),
        client_host="127.0.0.1",
    )
    assert request.framing is Framing.CHUNKED
    assert request.head.count(b"Transfer-Encoding") == 1


def _response(headers: list[tuple[bytes, bytes]], status: int = 200) -> ResponseHead:
    return ResponseHead(status, b"OK", "1.1", headers, True)


def test_response_length_is_kept_and_connection_restated() -> None:
    request = _head(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:5000\r\n\r\n")
    response = build_browser_response(
        _response([(b"Content-Length", b"5"), (b"Connection", b"close")]),
        request=request,
        close_delimited=False,
        keep_alive=True,
    )
    assert response.framing is Framing.LENGTH
    assert b"Content-Length: 5" in response.head
    assert response.head.count(b"Connection") == 1


def test_close_delimited_response_becomes_chunked_for_http11() -> None:
    request = _head(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:5000\r\n\r\n")
    response = build_browser_response(
        _response([]), request=request, close_delimited=True, keep_alive=True
    )
    assert response.framing is Framing.CHUNKED
    assert response.keep_alive


def test_close_delimited_response_stays_so_for_http10() -> None:
    request = _head(b"GET / HTTP/1.0\r\nHost: 127.0.0.1:5000\r\n\r\n")
    response = build_browser_response(
        _response([]), request=request, close_delimited=True, keep_alive=True
    )
    assert response.framing is Framing.CLOSE
    assert not response.keep_alive


def test_error_response_is_complete_and_plain_text() -> None:
    raw = error_response(502, "app down")
    assert raw.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
    assert raw.endswith(b"\r\n\r\nsandbridge: app down\n")


@pytest.mark.parametrize(
    ("status", "phrase"),
    [(408, b"Request Timeout"), (421, b"Misdirected Request"), (503, b"Service Unavailable")],
)
def test_every_refusal_has_its_standard_reason_phrase(status: int, phrase: bytes) -> None:
    assert error_response(status, "x").startswith(b"HTTP/1.1 %d %s\r\n" % (status, phrase))


def test_end_to_end_fields_drop_hop_by_hop_and_connection_named_ones() -> None:
    headers = [
        (b"Connection", b"keep-alive, X-Secret"),
        (b"X-Secret", b"1"),
        (b"Keep-Alive", b"timeout=5"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Proxy-Authorization", b"Basic eA=="),
        (b"Content-Length", b"3"),
        (b"Accept", b"*/*"),
    ]
    assert end_to_end_fields(headers) == [(b"Content-Length", b"3"), (b"Accept", b"*/*")]
    assert end_to_end_fields(headers, frozenset({b"content-length"})) == [(b"Accept", b"*/*")]


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        (b"http://127.0.0.1:4173/login", b"http://localhost:5000/login"),
        (b"http://localhost:4173", b"http://localhost:5000"),
        (b"http://[::1]:4173/a?b#c", b"http://localhost:5000/a?b#c"),
        (b"http://127.0.0.1:41730/x", b"http://127.0.0.1:41730/x"),
        (b"http://example.com/x", b"http://example.com/x"),
        (b"/relative", b"/relative"),
    ],
)
def test_location_naming_the_sandbox_origin_moves_to_the_host_origin(
    location: bytes, expected: bytes
) -> None:
    request = _head(b"GET / HTTP/1.1\r\nHost: localhost:5000\r\n\r\n")
    response = build_browser_response(
        _response([(b"Location", location), (b"Content-Length", b"0")], status=302),
        request=request,
        close_delimited=False,
        keep_alive=True,
        sandbox_port=4173,
    )
    assert b"Location: " + expected + b"\r\n" in response.head


# ConnectionHeads remembers one translation each way, so what it returns depends on the
# head before: every ordered pair of these heads is checked against a fresh translation.
REQUEST_FIELDS = [
    b"Host: 127.0.0.1:5000\r\n",
    b"Host: localhost:5000\r\nCookie: a=1; sandbridge_5000=s\r\n",
    b"Host: 127.0.0.1:5000\r\nOrigin: http://evil.example\r\n",
    b"Host: evil.example\r\n",
    b"Host: 127.0.0.1:5000\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\n",
    b"Host: 127.0.0.1:5000\r\nContent-Length: 3\r\n",
]
SESSION_ORIGINS = [
    origins_of([5000]),
    frozenset({b"http://evil.example"}) | origins_of([5000]),
    frozenset({b"http://evil.example"}) | origins_of([5000]),  # equal, not the same object
]
REQUESTS = [
    (method + b" " + target + b" HTTP/1.1\r\n" + fields + b"\r\n", origins)
    for method in (b"GET", b"DELETE", b"CONNECT")
    for target in (b"/", b"/app/x?y", b"*")
    for fields in REQUEST_FIELDS
    for origins in SESSION_ORIGINS
]


def _translated(build: Callable[[], UpstreamRequest]) -> object:
    try:
        request = build()
    except HttpError as refused:
        return ("refused", refused.status, str(refused))
    return (request.head, request.headers, request.framing, request.path, request.upgrade)


@pytest.mark.parametrize("base", ["/", "/app"])
def test_remembered_request_translation_equals_a_fresh_one(base: str) -> None:
    heads = [(_head(raw), origins) for raw, origins in REQUESTS]
    for before, before_origins in heads:
        for head, origins in heads:
            memory = ConnectionHeads(
                base_path=base, origin=AppOrigin(5000), client_host="127.0.0.1", sandbox_port=80
            )
            _translated(functools.partial(memory.request, before, before_origins))
            fresh = functools.partial(
                build_upstream_request,
                head,
                base_path=base,
                origin=AppOrigin(5000),
                client_host="127.0.0.1",
                session_origins=origins,
            )
            remembered = functools.partial(memory.request, head, origins)
            assert _translated(remembered) == _translated(fresh)


RESPONSES = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nETag: a\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nETag: b\r\n",
    b"HTTP/1.1 200 Fine\r\nContent-Length: 0\r\nETag: a\r\n",
    b"HTTP/1.1 201 OK\r\nContent-Length: 0\r\nETag: a\r\n",
    b"HTTP/1.1 200 OK\r\nETag: a\r\n",
    b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:80/next\r\nContent-Length: 0\r\n",
    b"HTTP/1.1 200 OK\r\nConnection: close, ETag\r\nETag: a\r\nContent-Length: 0\r\n",
]
BROWSER_REQUESTS = [
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1:5000\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: localhost:5000\r\n\r\n",
    b"HEAD / HTTP/1.1\r\nHost: 127.0.0.1:5000\r\n\r\n",
    b"GET / HTTP/1.0\r\nHost: 127.0.0.1:5000\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1:5000\r\nConnection: close\r\n\r\n",
]


def test_remembered_response_translation_equals_a_fresh_one() -> None:
    exchanges = []
    for raw_request in BROWSER_REQUESTS:
        request = _head(raw_request)
        for raw_response in RESPONSES:
            response = ResponseReader(request.method).feed(raw_response + b"\r\n")[0]
            assert isinstance(response, ResponseHead)
            exchanges += [(response, request, True), (response, request, False)]
    for before in exchanges:
        for response, request, close_delimited in exchanges:
            memory = ConnectionHeads(
                base_path="/", origin=AppOrigin(5000), client_host="127.0.0.1", sandbox_port=80
            )
            memory.response(before[0], before[1], close_delimited=before[2])
            fresh = build_browser_response(
                response,
                request=request,
                close_delimited=close_delimited,
                keep_alive=True,
                sandbox_port=80,
            )
            assert memory.response(response, request, close_delimited=close_delimited) == fresh


def test_set_cookie_of_relay_cookies_is_removed_from_responses() -> None:
    request = _head(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:5000\r\n\r\n")
    response = build_browser_response(
        _response(
            [
                (b"Set-Cookie", b"sandbridge_5000=planted; Path=/"),
                (b"set-cookie", b" SANDBRIDGE_6000=x; Max-Age=0"),
                (b"Set-Cookie", b"=sandbridge_5000=x"),
                (b"Set-Cookie", b"app=1; Path=/"),
                (b"Content-Length", b"0"),
            ]
        ),
        request=request,
        close_delimited=False,
        keep_alive=True,
    )
    assert b"sandbridge_" not in response.head.lower()
    assert b"Set-Cookie: app=1; Path=/\r\n" in response.head


def test_location_of_a_named_app_moves_to_its_label_origin() -> None:
    origin = AppOrigin(5000, "abcdefghijklmnopqrstuvwxyz")
    heads = ConnectionHeads(base_path="/", origin=origin, client_host="127.0.0.1", sandbox_port=80)
    request = _head(b"GET / HTTP/1.1\r\nHost: abcdefghijklmnopqrstuvwxyz.localhost:5000\r\n\r\n")
    heads.request(request, origin.origins)
    response = heads.response(
        _response([(b"Location", b"http://127.0.0.1:80/next"), (b"Content-Length", b"0")], 302),
        request,
        close_delimited=False,
    )
    assert b"Location: http://abcdefghijklmnopqrstuvwxyz.localhost:5000/next\r\n" in response.head


def test_a_referrer_policy_is_added_unless_the_app_set_one() -> None:
    request = _head(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:5000\r\n\r\n")
    default = build_browser_response(
        _response([(b"Content-Length", b"0")]),
        request=request,
        close_delimited=False,
        keep_alive=True,
    )
    assert b"\r\nReferrer-Policy: same-origin\r\n" in default.head
    chosen = build_browser_response(
        _response([(b"Referrer-Policy", b"origin"), (b"Content-Length", b"0")]),
        request=request,
        close_delimited=False,
        keep_alive=True,
    )
    assert chosen.head.lower().count(b"referrer-policy") == 1
    assert b"Referrer-Policy: origin\r\n" in chosen.head


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (b'"cookies"', None),
        (b'"*"', None),
        (b'"cache", "Cookies", "storage"', b'"cache", "storage"'),
        (b' "storage" , "*" ', b'"storage"'),
        (b'"cache"', b'"cache"'),
    ],
)
def test_a_private_apps_clear_site_data_keeps_cookies(value: bytes, kept: bytes | None) -> None:
    request = _head(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:5000\r\n\r\n")
    head = _response([(b"Clear-Site-Data", value), (b"Content-Length", b"0")])
    private = build_browser_response(
        head, request=request, close_delimited=False, keep_alive=True, private=True
    )
    if kept is None:
        assert b"clear-site-data" not in private.head.lower()
    else:
        assert b"\r\nClear-Site-Data: " + kept + b"\r\n" in private.head
    public = build_browser_response(head, request=request, close_delimited=False, keep_alive=True)
    assert b"\r\nClear-Site-Data: " + value + b"\r\n" in public.head  # the app's own business
