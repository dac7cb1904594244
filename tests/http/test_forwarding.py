"""What the relay changes in requests and responses."""

from __future__ import annotations

import pytest

from sandbridge.exceptions import HttpError
from sandbridge.http.forwarding import (
    Framing,
    build_browser_response,
    build_upstream_request,
    error_response,
)
from sandbridge.http.parser import RequestHead, RequestReader, ResponseHead


def _head(raw: bytes) -> RequestHead:
    event = RequestReader().feed(raw)[0]
    assert isinstance(event, RequestHead)
    return event


def _forward(raw: bytes, base: str = "/", port: int = 5000) -> bytes:
    return build_upstream_request(
        _head(raw), base_path=base, host_port=port, client_host="127.0.0.1"
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
        host_port=5000,
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
